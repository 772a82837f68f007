"""Files in and out: atomic writes with one-line errors, and bounded, non-blocking reads.

Writers (`atomic_write_text`, `atomic_write_bytes`, `atomic_output`, `atomic_path`) write a
temporary file in the target's directory, fsync it and `os.replace` it over the target, so a
reader never sees half a file and a failed write leaves the old file untouched. Any failure
removes the temporary file and raises `OutputError` with one line: what could not be written
and why (`cannot write out/t.json: directory out does not exist`).

A target that exists and is not a regular file or a directory (`/dev/stdout`, `/dev/full`, a
FIFO) cannot be replaced: it is written in place, and its errors are reported the same way.

`read_source_lines` reads a source file named by a trace, which may come from someone else:
regular files below a size cap only, never a FIFO, a device or a `/proc`/`/sys`/`/dev` path,
opened non-blocking.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import stat
import tokenize

from .errors import OutputError

MAX_SOURCE_BYTES = 2 * 1024 * 1024
_PSEUDO_ROOTS = ("/proc/", "/sys/", "/dev/")
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)


def _show(path) -> str:
    from .render.inert import terminal_safe

    return terminal_safe(path) if path else "''"


def _why(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


def _fail(display: str, why: str) -> OutputError:
    return OutputError(f"cannot write {_show(display)}: {why}")


def _plan(display: str) -> tuple[str, str, os.stat_result | None]:
    """("atomic", target, old stat or None) or ("direct", target, stat); raises OutputError.

    `target` is absolute, with symlinks resolved (so a symlinked output keeps its link).
    """
    if "\0" in display:
        raise _fail(display, "invalid path (it contains a NUL character)")
    try:
        target = os.path.realpath(os.path.abspath(display))
    except (OSError, ValueError) as e:
        raise _fail(display, f"invalid path ({e})") from None
    try:
        st = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise _fail(display, _why(e)) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise _fail(display, "it is a directory")
        if stat.S_ISREG(st.st_mode):
            return "atomic", target, st
        return "direct", target, st
    parent = os.path.dirname(target) or os.sep
    # the nearest existing ancestor says why the directory is missing
    probe = parent
    while True:
        try:
            pst = os.stat(probe)
        except (FileNotFoundError, NotADirectoryError):
            up = os.path.dirname(probe)
            if up == probe:
                break
            probe = up
            continue
        except OSError as e:
            raise _fail(display, _why(e)) from None
        if not stat.S_ISDIR(pst.st_mode):
            raise _fail(display, f"{probe} is not a directory")
        break
    if probe != parent:
        raise _fail(display, f"directory {parent} does not exist")
    return "atomic", target, None


def _create_temp(target: str, display: str) -> tuple[int, str]:
    """An exclusive new file beside `target` (mode 0o666 less the umask), its fd and path."""
    directory, name = os.path.split(target)
    stem, ext = os.path.splitext(name)
    for _ in range(100):
        tmp = os.path.join(directory, f".{stem}.{secrets.token_hex(4)}.tmp{ext}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_BINARY,
                         0o666)
        except FileExistsError:
            continue
        except OSError as e:
            raise _fail(display, _why(e)) from None
        return fd, tmp
    raise _fail(display, f"no free temporary name in {directory}")


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | _O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _finish(tmp: str, target: str, old: os.stat_result | None) -> None:
    if old is not None:
        os.chmod(tmp, stat.S_IMODE(old.st_mode))
    os.replace(tmp, target)
    _fsync_dir(os.path.dirname(target))


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "w", encoding: str = "utf-8"):
    """A file object open on a temporary file that replaces `path` when the block ends.

    `mode` is "w" (text, `encoding`) or "wb". If the block raises, `path` is untouched and the
    temporary file removed; an `OSError` (the block's or the writer's) becomes `OutputError`.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', not {mode!r}")
    display = os.fspath(path)
    kind, target, old = _plan(display)
    text = {"encoding": encoding} if mode == "w" else {}
    if kind == "direct":
        try:
            with open(target, mode, **text) as f:
                yield f
        except OSError as e:
            raise _fail(display, _why(e)) from None
        return
    fd, tmp = _create_temp(target, display)
    done = False
    try:
        with os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        _finish(tmp, target, old)
        done = True
    except OSError as e:
        raise _fail(display, _why(e)) from None
    finally:
        if not done:
            _remove(tmp)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """A temporary path (same directory and extension) to write by name; it replaces `path`.

    For writers that open the file themselves (`Trace.save(p)`, `Figure.savefig(p)`). The
    same guarantees and errors as `atomic_output`.
    """
    display = os.fspath(path)
    kind, target, old = _plan(display)
    if kind == "direct":
        try:
            yield target
        except OSError as e:
            raise _fail(display, _why(e)) from None
        return
    fd, tmp = _create_temp(target, display)
    os.close(fd)
    done = False
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _finish(tmp, target, old)
        done = True
    except OSError as e:
        raise _fail(display, _why(e)) from None
    finally:
        if not done:
            _remove(tmp)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> str:
    """Write `text` to `path` atomically; returns the path. Raises `OutputError`."""
    with atomic_output(path, "w", encoding=encoding) as f:
        f.write(text)
    return os.fspath(path)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> str:
    """Write `data` to `path` atomically; returns the path. Raises `OutputError`."""
    with atomic_output(path, "wb") as f:
        f.write(data)
    return os.fspath(path)


def check_output_path(path: str | os.PathLike) -> str:
    """Raise `OutputError` now if `path` surely cannot be written; return it made absolute.

    Creates and removes a probe file in the target directory (nothing is opened when the
    target is an existing device or FIFO). Writing can still fail later (a full disk).
    """
    display = os.fspath(path)
    kind, _target, _old = _plan(display)
    if kind == "atomic":
        fd, tmp = _create_temp(_target, display)
        os.close(fd)
        _remove(tmp)
    return os.path.abspath(display)


def read_regular_bytes(path: str | os.PathLike, max_bytes: int | None) -> bytes | None:
    """The bytes of `path` if it is a regular file of at most `max_bytes`, else None.

    Never opens a FIFO, a device, a directory or anything under /proc, /sys or /dev, and
    opens non-blocking, so a hostile path cannot hang or exhaust the reader.
    """
    try:
        name = os.fspath(path)
        real = os.path.realpath(name)
        if real.startswith(_PSEUDO_ROOTS):
            return None
        st = os.stat(real)
        if not stat.S_ISREG(st.st_mode) or (max_bytes is not None and st.st_size > max_bytes):
            return None
        fd = os.open(real, os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC | _O_BINARY)
    except (OSError, ValueError, TypeError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        chunks, total = [], 0
        limit = None if max_bytes is None else max_bytes + 1
        while limit is None or total < limit:
            chunk = os.read(fd, 1 << 20 if limit is None else min(1 << 20, limit - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if max_bytes is not None and len(data) > max_bytes:
        return None
    return data


def read_source_lines(path: str | os.PathLike,
                      max_bytes: int = MAX_SOURCE_BYTES) -> list[str] | None:
    """The lines (no line endings) of a Python source file, or None if it may not be read.

    See `read_regular_bytes`; the encoding follows the file's coding cookie (UTF-8 by
    default) and undecodable bytes are replaced.
    """
    data = read_regular_bytes(path, max_bytes)
    if data is None:
        return None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except (SyntaxError, LookupError):
        encoding = "utf-8"
    try:
        text = data.decode(encoding, errors="replace")
    except LookupError:
        text = data.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    return [ln.rstrip("\n") for ln in io.StringIO(text, newline=None).readlines()]
