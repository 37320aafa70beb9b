"""Strings that come from a model are untrusted; this module is the one rule for
where they may land. Input, output and node names, op types, attribute strings,
external-data locations and a model file's own name come from model zoos and
other teams, so each is either refused with an error that names it, or written
in the form its context needs:

    shell_word(s)        one bash word, single-quoted ($'...' when it holds
                         control characters); NUL cannot be passed and is refused
    cpp_string(s)        a C++ string literal
    md_code(s)           a Markdown code span (control characters shown escaped);
                         md_cell(s) the same in a table cell
    file_stems(names)    file names derived from names: [A-Za-z0-9_.-], unique
    inside(root, rel)    the path of rel under root, refused when it (or a link
                         on the way) leads out of root
    write_npz(f, arrays) an .npz keyed by the names verbatim (member names are
                         data, never extracted as paths by bridge)

Reading is as careful: `external_data_problems` applies onnx's own rules for
external-data locations (relative, inside the model's folder, a regular file,
no symbolic link), `links_out_of` finds links that leave a folder given as
MODEL, `archive_problems` finds members of a zip (.keras) that would leave it.

Only the standard library and numpy: every layer may use it.
"""
from __future__ import annotations

import os
import re
import stat
import unicodedata
import zipfile
from typing import Dict, Iterable, List, Mapping, Sequence

import numpy as np


class UntrustedNameError(ValueError):
    """A model string that cannot be carried where it would land; the message
    names it (repr) and says what to do."""


def shown(s: str) -> str:
    """`s` for an error message: quoted, control characters escaped, long ones cut."""
    text = repr(s)
    return text if len(text) <= 120 else text[:100] + f"...' ({len(s)} characters)"


# -- writing ---------------------------------------------------------------------
def is_control(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")


def shell_word(s: str) -> str:
    """`s` as exactly one bash word. Printable text goes in single quotes (inside
    them nothing is special; a quote is closed, escaped and reopened); text with
    control characters (a newline, ...) in ANSI-C quotes, so the word stays on one
    line. NUL cannot be in an argument at all: UntrustedNameError."""
    if "\0" in s:
        raise UntrustedNameError(f"{shown(s)} holds a NUL character, which no command line can carry")
    if not any(is_control(ch) for ch in s):
        return "'" + s.replace("'", "'\\''") + "'"
    out = []
    for ch in s:
        if ch in "\\'":
            out.append("\\" + ch)
        elif is_control(ch):  # its UTF-8 bytes: \u escapes depend on the shell's locale
            out.append("".join(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


_CPP_KEYWORDS = frozenset("""alignas alignof and asm auto bool break case catch char class const constexpr
continue decltype default delete do double else enum explicit export extern false float for friend goto if
inline int long mutable namespace new noexcept not nullptr operator or private protected public register
return short signed sizeof static struct switch template this throw true try typedef typeid typename union
unsigned using virtual void volatile while xor""".split())


def cpp_identifier(name: str, what: str) -> str:
    """`name` when it can be a C++ identifier (tensor and attribute names become
    REG_OP ports and struct fields), else ValueError naming it."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or "") or name in _CPP_KEYWORDS or name.startswith("__"):
        raise ValueError(f"{what} {name!r} cannot be a C++ identifier (letters, digits, _; no keyword)")
    return name


def cpp_string(s: str) -> str:
    """`s` (UTF-8) as a C++ string literal. Every byte outside printable ASCII is
    an octal escape (three digits: an escape never runs into the next character),
    and `?` is escaped too (no trigraphs)."""
    out = []
    for b in s.encode("utf-8"):
        ch = chr(b)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _visible(s: str) -> str:
    return "".join(ch.encode("unicode_escape").decode("ascii") if is_control(ch) else ch for ch in s)


def md_code(s: str) -> str:
    """`s` as a Markdown code span: nothing in it is markup (no links, HTML or
    emphasis). Control characters are shown escaped (a newline would end the
    line, two the paragraph); the backtick fence is longer than any run inside."""
    text = _visible(s)
    if not text:
        return "(empty)"
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    if text[0] in "` " or text[-1] in "` ":
        text = f" {text} "
    return f"{fence}{text}{fence}"


def md_cell(s: str) -> str:
    """`md_code` for a table cell: a `|` would end the cell, even in a code span."""
    return md_code(s).replace("|", "\\|")


_STEM_OK = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def file_stems(names: Sequence[str], fallback: str = "input") -> Dict[str, str]:
    """{name: file stem} for file names derived from model strings: a name that is
    already plain ([A-Za-z0-9_.-], at most 64, not starting with a dot) is kept;
    any other becomes its plain characters (others as `_`) or `<fallback><i>`.
    Stems are unique even on case-insensitive file systems."""
    out: Dict[str, str] = {}
    taken = set()
    for i, name in enumerate(names):
        if _STEM_OK.fullmatch(name):
            stem = name
        else:
            stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-")[:64] or f"{fallback}{i}"
        base, n = stem, 1
        while stem.casefold() in taken:
            stem, n = f"{base}_{n}", n + 1
        taken.add(stem.casefold())
        out[name] = stem
    return out


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def inside(root: str, rel: str) -> str:
    """`root/rel`, after checking that `rel` is a plain relative path (see
    `plain_relative`) whose real path (links resolved) is under the real `root`.
    The check for every file bridge writes or reads under a folder."""
    if not plain_relative(rel) or "" in rel.replace("\\", "/").split("/"):
        raise UntrustedNameError(f"{shown(rel)} is not a relative path inside {root} (absolute, '..' or empty part)")
    path = os.path.join(root, rel)
    if not _under(os.path.realpath(path), os.path.realpath(root)):
        raise UntrustedNameError(f"{shown(rel)} leads out of {root} through a symbolic link")
    return path


def write_npz(file, arrays: Mapping[str, np.ndarray]) -> None:
    """An .npz (uncompressed, as np.savez) keyed by `arrays`' names verbatim.
    Not np.savez(**arrays): a name such as `file` or `allow_pickle` would be taken
    as np.savez's own argument."""
    with zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            if "\0" in name:
                raise UntrustedNameError(f"array name {shown(name)} holds a NUL character, which an .npz cannot carry")
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


# -- reading ---------------------------------------------------------------------
def external_data_problems(model, base_dir: str) -> List[str]:
    """One line per external-data location of `model` (an onnx.ModelProto) that
    onnx's own checker would refuse (onnx.checker's _open_external_data): an
    absolute path, a path out of `base_dir`, a symbolic link, anything but a
    regular file. Checked before any byte is read."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data
    problems = []
    root = os.path.realpath(base_dir)
    for t in _get_all_tensors(model):
        if not uses_external_data(t):
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        rel = os.path.normpath(location) if location and "\0" not in location else location
        what = f"tensor {shown(t.name)}: external data {shown(location)}"
        path = os.path.join(base_dir, rel)
        if not plain_relative(rel):
            problems.append(f"{what} is not a relative path inside the model's folder {base_dir}")
        elif os.path.islink(path):
            problems.append(f"{what} is a symbolic link")
        elif not _under(os.path.realpath(path), root):
            problems.append(f"{what} leads out of {base_dir} (through a linked folder)")
        elif not os.path.isfile(path):
            problems.append(f"{what} is missing from {base_dir} (or not a regular file)")
    return problems


def links_out_of(folder: str) -> List[str]:
    """Paths (relative to `folder`) of symbolic links in it whose target is outside
    it; links are not followed while walking."""
    root = os.path.realpath(folder)
    found = []
    for here, dirs, files in os.walk(folder, followlinks=False):
        for entry in dirs + files:
            full = os.path.join(here, entry)
            if os.path.islink(full) and not _under(os.path.realpath(full), root):
                found.append(os.path.relpath(full, folder))
    return sorted(found)


def archive_problems(path: str) -> List[str]:
    """Members of the zip archive `path` that would leave it when extracted: an
    absolute name, a `..` part, a symbolic link. [] for a clean archive (and for a
    file that is no zip: its own loader says so)."""
    if not zipfile.is_zipfile(path):
        return []
    problems = []
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name = info.filename
            if not plain_relative(name):
                problems.append(f"member {shown(name)} leaves the archive")
            elif stat.S_ISLNK(info.external_attr >> 16):
                problems.append(f"member {shown(name)} is a symbolic link")
    return problems


def plain_relative(name: str) -> bool:
    """True for a relative path that stays where it is joined (no absolute start,
    no `..` part, no NUL): what a SavedModel's asset file names must be."""
    parts = name.replace("\\", "/").split("/")
    return bool(name) and "\0" not in name and not name.startswith(("/", "\\")) \
        and not re.match(r"[A-Za-z]:", name) and ".." not in parts


def first(problems: Iterable[str]) -> str:
    problems = list(problems)
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return problems[0] + more if problems else ""
