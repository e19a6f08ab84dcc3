"""The continuous memory's math: the basis, the ridge fit and the Gaussian read (docs/design/infinite-former.md)."""
