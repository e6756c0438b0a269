"""Reading a file exactly as it is and writing it back without losing a byte.

The text is decoded the way Python itself decodes a source file (BOM, then PEP 263 coding cookie,
then UTF-8), with no newline translation, so that a fix can be encoded back to the same bytes
everywhere it did not change.
"""

from __future__ import annotations

import codecs
import errno
import io
import itertools
import os
import re
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # where Python ends lines (str.splitlines also splits at form feeds)


class SourceError(Exception):
    """A file that cannot be read as Python source; the message says why, and the position where
    (with that line's text) when one byte is to blame."""

    def __init__(self, message: str, line: int = 1, column: int = 1, source_lines: list[str] | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.source_lines = source_lines or []


@dataclass
class SourceFile:
    path: Path
    display: str  # the path as the user should see it
    text: str
    encoding: str
    bom: bool

    @property
    def newline(self) -> str:
        """The file's first line ending: what inserted lines use."""
        for ending in ("\r\n", "\n", "\r"):
            index = self.text.find(ending)
            if index != -1 and not (ending == "\n" and index > 0 and self.text[index - 1] == "\r"):
                return ending
        return "\n"

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def decode_source(data: bytes, path: Path, display: str) -> SourceFile:
    if b"\x00" in data:
        raise SourceError("binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if _is_utf8(b"".join(itertools.islice(io.BytesIO(data), 2))):
            raise SourceError(f"cannot decode: {error}") from None  # the coding cookie is wrong
        encoding = "utf-8"  # a byte that is not UTF-8 before any cookie applies: decoding says where
    bom = data.startswith(codecs.BOM_UTF8)
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    body = data[len(codecs.BOM_UTF8):] if bom else data
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as error:
        # The text decodes up to the bad byte: its lines there give the position.
        before = split_lines(body[:error.start].decode(encoding))
        line = split_lines(body.decode(encoding, errors="replace"))[len(before) - 1]
        undecodable = " ".join(f"0x{byte:02x}" for byte in body[error.start:error.end])
        raise SourceError(f"not valid {encoding}: cannot decode {undecodable}: {error.reason}", len(before), len(before[-1]) + 1, [line]) from None
    except LookupError as error:
        raise SourceError(f"not valid {encoding}: {error}") from None
    return SourceFile(path=path, display=display, text=text, encoding=encoding, bom=bom)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def split_lines(text: str) -> list[str]:
    """The lines of `text` without their endings."""
    return _LINE_BREAK.split(text)


def read_source(path: Path, display: str) -> SourceFile:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SourceError(f"cannot read: {error.strerror or error}") from None
    return decode_source(data, path, display)


def write_atomically(path: Path, data: bytes) -> None:
    """Temp file in the same folder, fsync, keep the permission bits, then rename over the original.

    A crash at any point leaves either the original or the new file, never a torn one. A read-only
    file is refused (even for root, who could replace it): its owner said it must not change.
    """
    mode = path.stat().st_mode & 0o7777
    if not mode & 0o222:
        raise PermissionError(errno.EACCES, "the file is read-only")
    descriptor, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".fsdplint.tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except BaseException:
        try:
            os.unlink(temp_name)
        except FileNotFoundError:
            pass
        raise
