"""`fsdplint server`: a Language Server on stdin/stdout, built on pygls and the public `fsdplint.api`.

It checks each open file on its own as it is opened and edited (with the `[tool.fsdplint]` settings
of the nearest pyproject.toml), publishes the findings as diagnostics, and offers each finding's fix
as a quick fix (safe fixes preferred, unsafe ones labelled) plus `source.fixAll.fsdplint`, which
applies every safe fix. The API counts columns in code points; LSP counts them in the units the
client and server agree on at initialization (UTF-16 unless the client offers another), so every
position is converted on its own line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from fsdplint import __version__, api
from fsdplint.reporters import DOCS_URL

SOURCE = "fsdplint"
FIX_ALL = "source.fixAll.fsdplint"
_SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning}
_UNNECESSARY = {"FSDP003"}  # an unused `# noqa`: editors fade it out
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # where Python and LSP end lines (not at form feeds)


@dataclass
class _Checked:
    version: int | None
    text: str
    path: str
    config: Path | None
    diagnostics: list[tuple[api.Diagnostic, types.Diagnostic]]


class FsdplintServer(LanguageServer):
    def __init__(self) -> None:
        # Full sync: the client sends the whole text on each change, so lines are only ever split here.
        super().__init__("fsdplint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
        self.checked: dict[str, _Checked] = {}
        self.shown_errors: set[str] = set()  # each configuration error once, not on every keystroke

    def check(self, uri: str) -> _Checked:
        """The findings for the document's current text, checked once per version."""
        document = self.workspace.get_text_document(uri)
        cached = self.checked.get(uri)
        if cached and cached.version == document.version and cached.text == document.source:
            return cached
        root = self.workspace.root_path
        try:
            config = _config(document)
            path = _shown_path(document, config, root)
            found = api.check_source(document.source, path, config=config)
        except ValueError as error:  # an invalid pyproject.toml (the message names it): say so, and check with the defaults
            self.show_config_error(str(error))
            config = None
            path = _shown_path(document, config, root)
            found = api.check_source(document.source, path)
        lines = _LINE_BREAK.split(document.source)
        diagnostics = [(d, _lsp_diagnostic(d, lines, document)) for d in found]
        self.checked[uri] = _Checked(document.version, document.source, path, config, diagnostics)
        return self.checked[uri]

    def show_config_error(self, message: str) -> None:
        if message not in self.shown_errors:
            self.shown_errors.add(message)
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Error, message=f"fsdplint: {message}; checking with the default settings until it is fixed"))

    def publish(self, uri: str) -> None:
        checked = self.check(uri)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, version=checked.version, diagnostics=[lsp for _, lsp in checked.diagnostics]))

    def forget(self, uri: str) -> None:
        self.checked.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def _saved_file(document: TextDocument) -> str | None:
    """The document's file; None for an unsaved buffer, which gets the default settings."""
    return document.path if document.path and document.uri.startswith("file:") else None


def _config(document: TextDocument) -> Path | None:
    """The nearest pyproject.toml with a [tool.fsdplint] table (ConfigError when one on the way up
    is not valid TOML)."""
    file = _saved_file(document)
    return api.find_config(file) if file else None


def _shown_path(document: TextDocument, config: Path | None, root: str | None) -> str:
    """The path checks see: relative to the config's folder (what `per-file-ignores` patterns match),
    else to the workspace, as the CLI shows paths."""
    file = _saved_file(document)
    if file is None:
        return document.uri
    base = config.parent if config else Path(root) if root else None
    try:
        return Path(file).relative_to(base).as_posix() if base else file
    except ValueError:
        return file


def _lsp_position(position: api.Position, lines: list[str], document: TextDocument) -> types.Position:
    line = position.line - 1
    text = lines[line] if line < len(lines) else ""
    return types.Position(line=line, character=document.position_codec.client_num_units(text[:position.column - 1]))


def _lsp_range(span: api.Range, lines: list[str], document: TextDocument) -> types.Range:
    return types.Range(start=_lsp_position(span.start, lines, document), end=_lsp_position(span.end, lines, document))


def _lsp_diagnostic(diagnostic: api.Diagnostic, lines: list[str], document: TextDocument) -> types.Diagnostic:
    return types.Diagnostic(
        range=_lsp_range(diagnostic.range, lines, document),
        message=diagnostic.message,
        severity=_SEVERITY[diagnostic.severity],
        code=diagnostic.code,
        code_description=types.CodeDescription(href=DOCS_URL.format(code=diagnostic.code)),
        source=SOURCE,
        tags=[types.DiagnosticTag.Unnecessary] if diagnostic.code in _UNNECESSARY else None,
        # The document is checked alone, so every other place a finding involves is in it.
        related_information=[types.DiagnosticRelatedInformation(
            location=types.Location(uri=document.uri, range=_lsp_range(related.range, lines, document)), message=related.message)
            for related in diagnostic.related] or None,
    )


def _lsp_edit(uri: str, edits: tuple[api.TextEdit, ...], text: str, document: TextDocument) -> types.WorkspaceEdit:
    lines = _LINE_BREAK.split(text)
    return types.WorkspaceEdit(changes={uri: [types.TextEdit(range=_lsp_range(edit.range, lines, document), new_text=edit.new_text) for edit in edits]})


def _overlaps(a: types.Range, b: types.Range) -> bool:
    def key(position: types.Position) -> tuple[int, int]:
        return position.line, position.character

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def _wanted(kind: str, only: Sequence[str] | None) -> bool:
    return not only or any(kind == prefix or kind.startswith(prefix + ".") for prefix in only)


def code_actions(server: FsdplintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    checked = server.check(uri)
    document = server.workspace.get_text_document(uri)
    only = params.context.only
    actions = []
    if _wanted(types.CodeActionKind.QuickFix, only):
        for diagnostic, lsp in checked.diagnostics:
            if diagnostic.fix is None or not _overlaps(lsp.range, params.range):
                continue
            safe = diagnostic.fix.applicability == "safe"
            actions.append(types.CodeAction(
                title=f"{diagnostic.fix.message} ({diagnostic.code}{'' if safe else ', unsafe fix: check the result'})",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[lsp],
                is_preferred=safe,
                edit=_lsp_edit(uri, diagnostic.fix.edits, checked.text, document),
            ))
    if _wanted(FIX_ALL, only) and any(d.fix and d.fix.applicability == "safe" for d, _ in checked.diagnostics):
        fixed = api.fix_source(checked.text, checked.path, config=checked.config)
        actions.append(types.CodeAction(
            title="fsdplint: apply every safe fix", kind=FIX_ALL,
            edit=_lsp_edit(uri, api.text_edits(checked.text, fixed), checked.text, document),
        ))
    return actions


def create_server() -> FsdplintServer:
    server = FsdplintServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: FsdplintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: FsdplintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: FsdplintServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.checked.pop(params.text_document.uri, None)  # the config next to it may have changed
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: FsdplintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]))
    def code_action(ls: FsdplintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return code_actions(ls, params)

    return server


def serve() -> None:
    create_server().start_io()
