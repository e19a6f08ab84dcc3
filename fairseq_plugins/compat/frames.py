"""Which functions an exception passed through, read from its traceback.

The one-line messages (:mod:`.diagnoses`, :mod:`.data_files`) tell fairseq's faults apart by
where fairseq raised them: by each frame's source file and function name, never by the
frames' local variables.
"""


def frames(exc: BaseException):
    """The frames of ``exc``'s traceback, outermost first."""
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def is_at(frame, path_suffix: str, function: str) -> bool:
    """Whether ``frame`` runs ``function`` of a file whose path ends in ``path_suffix``
    (``fairseq/trainer.py``; ``/`` on every platform)."""
    return (frame.f_code.co_name == function
            and frame.f_code.co_filename.replace("\\", "/").endswith(path_suffix))


def passed_through(exc: BaseException, path_suffix: str, function: str) -> bool:
    """Whether ``exc`` was raised through ``function`` of ``path_suffix`` (:func:`is_at`)."""
    return any(is_at(frame, path_suffix, function) for frame in frames(exc))
