"""Reading and writing JSON or YAML documents within the input limits.

The one place a file becomes a Python value (and back): :func:`read_document` refuses
files over MAX_INPUT_BYTES, integers longer than MAX_INT_DIGITS digits, duplicate keys and
YAML alias bombs, each with an error naming the file; :func:`write_document` writes through
a temporary file, and :func:`write_output` / :func:`check_output` keep every output path
safe (no device, directory or symlinked special file replaced; a failed write is an error
naming the file).  The readers of instances, plans and device files (:mod:`nest_cp.io`,
:mod:`nest_cp.profiles.devicefile`) build on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path as FsPath
from typing import Any

import yaml

from nest_cp.model.errors import InstanceFormatError, NestCpError
from nest_cp.model.limits import MAX_INPUT_BYTES, MAX_INT_DIGITS, MAX_YAML_NODES


def read_document(path: str | FsPath, error: type[InstanceFormatError] = InstanceFormatError
                  ) -> Any:
    """Parse a JSON or YAML file (by extension; JSON otherwise), within the input limits.

    Files over MAX_INPUT_BYTES (``/dev/zero`` included), integers of more than
    MAX_INT_DIGITS digits and YAML documents whose aliases expand to more than
    MAX_YAML_NODES values are refused with a message saying so; an over-long
    integer is reported at its field by the reader (it parses to a :class:`LongInteger`).
    """
    path = FsPath(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_INPUT_BYTES + 1)
        if len(raw) > MAX_INPUT_BYTES:
            raise error(f"expected a file of at most {MAX_INPUT_BYTES // 2**20} MiB, got a "
                        f"larger one", file=str(path))
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise error("expected an existing file, got none", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"expected a readable UTF-8 file ({exc.__class__.__name__})",
                    file=str(path)) from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            return yaml.load(text, Loader=_StrictYamlLoader)  # noqa: S506 - a SafeLoader
        except _DuplicateKey as exc:
            raise error(f"expected each key once, got {exc.key!r} twice", file=str(path),
                        field=exc.key) from None
        except _TooLarge as exc:
            raise error(str(exc), file=str(path)) from None
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", None)
            at = f" (line {line + 1})" if line is not None else ""
            raise error(f"expected valid YAML{at}", file=str(path)) from None
        except RecursionError:
            raise error("expected YAML nested less deeply", file=str(path)) from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_integer)
    except _DuplicateKey as exc:
        raise error(f"expected each key once, got {exc.key!r} twice", file=str(path),
                    field=exc.key) from None
    except json.JSONDecodeError as exc:
        raise error(f"expected valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                    file=str(path)) from None
    except RecursionError:
        raise error("expected JSON nested less deeply", file=str(path)) from None


class LongInteger:
    """An integer literal too long to read (more than MAX_INT_DIGITS digits).

    Kept as a placeholder so the field reading it reports the error with its path
    (``training.global_batch: expected an integer ..., got a 4000-digit integer``).
    """

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"a {self.digits}-digit integer"


def _integer(text: str) -> int | LongInteger:
    digits = len(text.lstrip("+-"))
    return LongInteger(digits) if digits > MAX_INT_DIGITS else int(text)


class _TooLarge(ValueError):
    """A YAML document whose aliases expand past MAX_YAML_NODES values."""


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """JSON objects with a repeated key are rejected (json keeps the last one silently)."""
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(str(key))
        result[key] = value
    return result


class _StrictYamlLoader(yaml.SafeLoader):
    """A SafeLoader that rejects repeated keys and reads 80e9 or 1e-6 as floats (YAML 1.2).

    PyYAML follows YAML 1.1, where a float needs a dot (8.0e9), so numbers copied from
    JSON would otherwise arrive as strings.  It also refuses alias "bombs": anchors
    referenced so often that the document expands to more than MAX_YAML_NODES values
    (aliases are resolved by reference, but every reader of the result walks the
    expansion), and reads over-long integers as :class:`LongInteger`.
    """

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set())
        return node

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _DuplicateKey(str(key))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        digits = len(self.construct_scalar(node).replace("_", "").lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            return LongInteger(digits)
        return super().construct_yaml_int(node)


_StrictYamlLoader.add_constructor("tag:yaml.org,2002:int", _StrictYamlLoader.construct_yaml_int)
_StrictYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"""),
    list("-+0123456789"))


def _expanded_size(node, sizes: dict[int, int], active: set[int]) -> int:
    """Values ``node`` stands for with every alias expanded; _TooLarge past MAX_YAML_NODES."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in active:
        raise _TooLarge("expected YAML without recursive aliases, got an anchor inside itself")
    active.add(key)
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = []
    size = 1 + sum(_expanded_size(child, sizes, active) for child in children)
    active.discard(key)
    if size > MAX_YAML_NODES:
        raise _TooLarge(f"expected at most {MAX_YAML_NODES} values with YAML aliases expanded, "
                        f"got more (an alias bomb?)")
    sizes[key] = size
    return size


def write_document(data: Any, path: str | FsPath) -> None:
    """Write JSON, or YAML when the extension says so, through :func:`write_output`."""
    path = FsPath(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        text = yaml.safe_dump(data, sort_keys=False)
    else:
        text = json.dumps(data, indent=1) + "\n"
    write_output(path, text)


# ------------------------------------------------------------------ output paths
#
# nest-cp runs as root on some machines, where a careless write replaces a device node or
# a directory, or follows a symlink into one.  Every file a command writes goes through
# write_output, and every command checks its output paths with check_output before it
# starts work.


def check_output(path: str | FsPath) -> tuple[FsPath, bool]:
    """Where writing ``path`` goes and whether in place; NestCpError when it must not be written.

    A regular file, or a new name in an existing folder, is written to a temporary file
    beside it and renamed over it (after following symlinks: the link stays, its target is
    replaced).  A pipe, /dev/null, /dev/full or a terminal is written in place.  Anything
    else (a directory, a block or other character device, a socket, or a symlink to one)
    is refused, with the file named.
    """
    path = FsPath(path)
    try:
        status = os.stat(path)  # follows symlinks: the type of what would be written
    except FileNotFoundError:
        target = FsPath(os.path.realpath(path))
        if not target.parent.is_dir():
            raise NestCpError(f"{path}: expected an output path in an existing folder, got "
                              f"missing folder {target.parent}") from None
        return target, False
    except OSError as exc:
        raise NestCpError(f"{path}: cannot write ({exc.strerror or exc})") from None
    mode = status.st_mode
    if stat.S_ISREG(mode):
        return FsPath(os.path.realpath(path)), False
    if stat.S_ISFIFO(mode) or (stat.S_ISCHR(mode) and _stream_device(status.st_rdev)):
        return path, True
    raise NestCpError(f"{path}: expected a regular file or a new file name, got "
                      f"{_file_kind(mode)}; nest-cp does not write into it")


def refuse_inputs_as_outputs(outputs: Iterable[str | FsPath | None],
                            inputs: Iterable[str | FsPath | None]) -> None:
    """NestCpError when an output of a command is one of its input files (``solve I.json -o
    I.json``): writing it would replace the input.  Two paths are one file when
    :func:`os.path.samefile` says so (links and ``./`` spellings included); an output that
    does not exist yet is no input.  ``None`` entries (options not given) are skipped."""
    sources = [source for source in inputs if source is not None]
    for output in outputs:
        if output is None or not os.path.isfile(output):
            continue
        for source in sources:
            try:
                same = os.path.samefile(output, source)
            except OSError:
                same = False
            if same:
                raise NestCpError(f"{output}: expected an output other than the command's "
                                  f"inputs, got the input {source} (it would be overwritten)")


def write_output(path: str | FsPath, content: str | bytes) -> None:
    """Write ``content`` to ``path`` as :func:`check_output` allows; NestCpError naming the
    file when it may not be written or the write fails (a full disk included), leaving an
    existing file as it was."""
    target, in_place = check_output(path)
    data = content.encode("utf-8") if isinstance(content, str) else content
    if in_place:
        try:
            with open(target, "wb") as handle:
                handle.write(data)
        except OSError as exc:
            raise NestCpError(f"{path}: cannot write ({exc.strerror or exc})") from None
        return
    try:
        handle, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                       dir=target.parent)
    except OSError as exc:
        raise NestCpError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(tmp, _new_file_mode(target))
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise NestCpError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _stream_device(rdev: int) -> bool:
    """/dev/null, /dev/full, or a terminal (ttys, the controlling tty, pseudo-terminals)."""
    for name in ("/dev/null", "/dev/full"):
        with contextlib.suppress(OSError):
            if os.stat(name).st_rdev == rdev:
                return True
    return os.major(rdev) in (4, 5) or 136 <= os.major(rdev) <= 143


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a special file"


def _new_file_mode(target: FsPath) -> int:
    """An existing file's permission bits, else 0o666 less the umask (as open() would)."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(os.stat(target).st_mode)
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
