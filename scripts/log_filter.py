#!/usr/bin/env python3
"""What the user sees of a fairseq tool: its progress, results and errors, without the noise.

    python3 scripts/log_filter.py --exec fairseq-train ARGS...   # scripts/train.sh, evaluate.sh, train-summarizer.sh
    COMMAND 2>&1 | python3 scripts/log_filter.py                  # a stream
    python3 scripts/log_filter.py --tail 20 < LOG                 # the last 20 lines worth showing of a log

Dropped, on stdout and stderr alike (fairseq logs to stdout in fairseq-train, to stderr in
fairseq-eval-lm and fairseq-generate):

* Python warning blocks (``FILE:LINE: SomethingWarning: message`` + message lines + the source
  line) raised in an installed package (``site-packages``/``dist-packages``: hydra's pages of
  deprecation notes, torch's and fairseq's FutureWarnings), and hydra's ``sys:1`` schema warning;
* fairseq's log records that ask nothing of the user (:data:`NOISE`): ``Please install
  tensorboardX``, the multi-KB config dump, the model's module tree, the batch iterator's
  bookkeeping, ``detected shared parameter``, hydra's DEBUG lines.

Everything else passes, in order: every training progress, validation and checkpoint line,
results, this project's own warnings, errors and tracebacks. The first time something is
hidden, one line says so (before it, so that the tool's last line stays last). ``QUIET=0`` in
the environment passes everything (``--exec`` then runs the command as it is).

``--exec`` replaces this process by the command (its pid, exit status and signals are the
command's: a script that ``exec``s this can be killed like the tool) with stdout and stderr
through one filter process forked first. The filter reads stdout before stderr whenever both
have output, so the order of the tool's flushed writes is kept: the one-line
``fairseq_plugins: error: ...`` that the plugin prints after flushing stdout stays the last line.
:func:`fairseq_plugins.report.quiet.quiet_imports` does the same inside a tool that imports fairseq itself.
"""

import collections
import os
import re
import select
import signal
import sys

HEADER = re.compile(r"^(?P<path>\S[^:]*):\d+: (?P<category>\w*Warning): ")
LIBRARY = ("site-packages", "dist-packages")
MAX_BLOCK = 20  # a longer "warning block" is not one: pass it
# lines that never belong to a warning's message: fairseq's log lines, tracebacks, errors
NOT_MESSAGE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:|Traceback |"
                         r"\S+: error: )")
# a log record in fairseq's format (stdout of fairseq-train) or logging's default one (the other tools' stderr)
RECORD = re.compile(r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (?P<level>[A-Z]+) \| (?P<name>[\w.]+) \| "
                    r"|(?P<plain_level>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<plain_name>[\w.]+):)(?P<message>.*)$")
# fairseq's records that ask nothing of the user: (logger name, message) patterns, full match of the name
NOISE = [
    (r"fairseq\.tasks\.text_to_speech", r"Please install tensorboardX"),
    (r"fairseq_cli\.\w+", r"\{'_name': "),  # the whole config on one line (the checkpoint keeps it)
    (r"fairseq_cli\.train", r"[A-Z]\w*\($"),  # the model's module tree: this line, then the tree up to ")"
    (r"fairseq_cli\.train", r"num\. expert model params: 0 \(|Start iterating over samples$"),
    (r"fairseq\.tasks\.fairseq_task", r"(can_reuse_epoch_itr|reuse_dataloader|rebuild_batches) = |"
                                      r"creating new batches for epoch "),
    (r"fairseq\.data\.iterators", r"grouped total_num_itrs = "),
    (r"fairseq\.trainer", r"detected shared parameter: "),
    (r"fairseq\.checkpoint_utils", r"State of \w+ is ready to be persisted with the checkpoint$"),
]
NOISE = [(re.compile(name), re.compile(message)) for name, message in NOISE]
MODEL_TREE = re.compile(r"[A-Z]\w*\($")
NOTE = "(fairseq's setup messages and the libraries' warnings are hidden; QUIET=0 shows them)\n"
PARTIAL_WAIT = 0.5  # seconds: a line without its newline yet (a prompt) is passed as it is after this


def _library_warning(block) -> bool:
    path = HEADER.match(block[0]).group("path")
    if path == "sys":
        return "hydra" in "".join(block).lower()
    return any(part in path for part in LIBRARY)


def _noise(line):
    """``None`` to keep the line; else whether a module tree follows (dropped up to its ")")."""
    found = RECORD.match(line.rstrip("\n"))
    if found is None:
        return None
    level, name = found.group("level") or found.group("plain_level"), found.group("name") or found.group("plain_name")
    message = found.group("message")
    if level == "DEBUG" and name.split(".")[0] == "hydra":
        return False
    for name_re, message_re in NOISE:
        if name_re.fullmatch(name) and message_re.match(message):
            return bool(MODEL_TREE.fullmatch(message)) and name == "fairseq_cli.train"
    return None


class LineFilter:
    """One stream's filter: :meth:`feed` a line (with its newline), get the lines to write."""

    def __init__(self):
        self.block = []  # a warning block being read
        self.in_tree = False  # inside the model's module tree
        self.dropped = 0

    def _end_block(self):
        block, self.block = self.block, []
        if block and _library_warning(block):
            self.dropped += len(block)
            return []
        return block

    def feed(self, line):
        if self.in_tree:
            if not (RECORD.match(line) or HEADER.match(line) or NOT_MESSAGE.match(line)):
                self.dropped += 1
                self.in_tree = line.rstrip("\n") != ")"
                return []
            self.in_tree = False
        if HEADER.match(line):
            out = self._end_block()
            self.block = [line]
            return out
        out = self._end_block() if self.block and NOT_MESSAGE.match(line) else []
        if self.block:
            self.block.append(line)
            if line.startswith("  ") or len(self.block) > MAX_BLOCK:  # the source line ends a warning
                out += self._end_block()
            return out
        tree = _noise(line)
        if tree is not None:
            self.dropped += 1
            self.in_tree = tree
            return out
        return out + [line]

    def close(self):
        return self._end_block()


def filter_lines(lines, write, note=None):
    """Write the lines to keep with ``write`` (``note``, if given, once before the first
    line is hidden); returns how many were dropped."""
    f = LineFilter()
    for line in lines:
        kept = f.feed(line)
        if f.dropped and note is not None:
            write(note)
            note = None
        for k in kept:
            write(k)
    for k in f.close():
        write(k)
    return f.dropped


def _write_all(fd, data: bytes):
    while data:
        data = data[os.write(fd, data):]


def _pump(sources):
    """Filter ``{read fd: write fd}`` until every source is closed; the first source wins
    whenever several have output, so writes keep the order in which the command made them."""
    filters = {fd: LineFilter() for fd in sources}
    pending = {fd: b"" for fd in sources}
    note = [NOTE.encode()]
    order = list(sources)

    def emit(fd, lines):
        f = filters[fd]
        for line in lines:
            try:
                kept = f.feed(line)
            except Exception:  # noqa: BLE001 - a filter fault must never cost the user a line: pass it as it is
                kept = [line]
            if f.dropped and note:
                _write_all(sources[order[-1]], note.pop())
            for k in kept:
                _write_all(sources[fd], k.encode("utf-8", "surrogateescape"))

    while filters:
        live = [fd for fd in order if fd in filters]
        ready, _, _ = select.select(live, [], [], PARTIAL_WAIT if any(pending[fd] for fd in live) else None)
        if not ready:  # a partial line and nothing more: show it as it is
            for fd in live:
                if pending[fd]:
                    _write_all(sources[fd], pending[fd])
                    pending[fd] = b""
            continue
        fd = next(fd for fd in live if fd in ready)
        data = os.read(fd, 65536)
        if not data:
            if pending[fd]:
                emit(fd, [pending[fd].decode("utf-8", "surrogateescape")])
            for k in filters.pop(fd).close():
                _write_all(sources[fd], k.encode("utf-8", "surrogateescape"))
            os.close(fd)
            continue
        *lines, pending[fd] = (pending[fd] + data).split(b"\n")
        emit(fd, [line.decode("utf-8", "surrogateescape") + "\n" for line in lines])


def exec_filtered(argv):
    """Become ``argv`` with its stdout and stderr through a forked filter (see the module doc)."""
    if os.environ.get("QUIET") == "0":
        os.execvp(argv[0], argv)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if os.fork() == 0:  # the filter: stays until the command and its children closed both pipes
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # Ctrl-C is the tool's to report; the filter shows it
        os.close(out_w)
        os.close(err_w)
        os.close(0)
        try:
            _pump({out_r: 1, err_r: 2})
        except OSError:  # nobody reads any more (a closed pipe or terminal)
            pass
        finally:
            os._exit(0)
    os.close(out_r)
    os.close(err_r)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, f"log_filter.py: error: cannot run {argv[0]}: {e.strerror}\n".encode())
        os._exit(127)


def main(argv):
    if argv[:1] == ["--exec"] and len(argv) > 1:
        exec_filtered(argv[1:])
    quiet = os.environ.get("QUIET") != "0"
    if argv[:1] == ["--tail"] and len(argv) == 2 and argv[1].isdigit():
        last = collections.deque(maxlen=int(argv[1]))
        if quiet:
            filter_lines(sys.stdin, last.append)
        else:
            last.extend(sys.stdin)
        sys.stdout.writelines(last)
        return 0
    if argv:
        print("usage: log_filter.py [--exec COMMAND ARGS... | --tail N]", file=sys.stderr)
        return 2

    def write(line):
        sys.stdout.write(line)
        sys.stdout.flush()

    lines = iter(sys.stdin.readline, "")
    if quiet:
        filter_lines(lines, write, NOTE)
    else:
        for line in lines:
            write(line)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole pipeline; the tool reports it
        sys.exit(130)
