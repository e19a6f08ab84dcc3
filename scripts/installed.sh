# Sourced by the recipes that install on first use: installed PYTHON MODULE... succeeds when PYTHON
# finds every module. The modules are looked up, not imported (an import of fairseq takes seconds).
installed() {
  local python=$1; shift
  "$python" -c 'import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))' \
    "$@" 2>/dev/null
}
