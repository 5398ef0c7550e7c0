"""How a :class:`symgrad.Function` shows itself in Jupyter: ``_repr_html_`` / ``_repr_markdown_``.

The view names the function, its parameters, ``wrt``, target and argument types, and shows the
generated source, highlighted with the standard library only (``tokenize`` for the tokens,
``html.escape`` for the text, inline styles so no stylesheet is needed). Before any call it
shows what ``.source`` would (the argument types ``.source`` guesses); if that fails it says so.
A repr never raises: whatever goes wrong becomes a note in the view.
"""
from __future__ import annotations

import builtins
import html
import io
import keyword
import token
import tokenize

from .source_contract import checked_source

# Inline colours (a notebook may drop <style> blocks of untrusted output).
STYLES = {"keyword": "color:#0000c0;font-weight:bold", "builtin": "color:#6f42c1",
          "number": "color:#098658", "string": "color:#a31515",
          "comment": "color:#6a737d;font-style:italic", "module": "color:#005cc5",
          "def": "color:#795e26;font-weight:bold"}
_BUILTINS = set(dir(builtins))


def _token_style(tok: tokenize.TokenInfo, previous: str | None) -> str | None:
    if tok.type == token.NAME:
        if keyword.iskeyword(tok.string):
            return "keyword"
        if previous == "def":
            return "def"
        if tok.string == "np":
            return "module"
        if tok.string in _BUILTINS:
            return "builtin"
        return None
    return {token.NUMBER: "number", token.STRING: "string", tokenize.COMMENT: "comment"}.get(tok.type)


def highlight(source: str) -> str:
    """Python source as HTML spans (the text content is exactly ``source``, escaped)."""
    lines = source.splitlines(keepends=True)
    out, row, col, previous = [], 1, 0, None

    def advance(to_row, to_col):
        nonlocal row, col
        while row < to_row:
            out.append(html.escape(lines[row - 1][col:]))
            row, col = row + 1, 0
        if row <= len(lines):
            out.append(html.escape(lines[row - 1][col:to_col]))
        col = to_col

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return html.escape(source)
    for tok in tokens:
        if tok.type == token.ENDMARKER:
            break
        advance(*tok.start)
        text = html.escape(tok.string)
        style = _token_style(tok, previous)
        out.append(f'<span style="{STYLES[style]}">{text}</span>' if style and text else text)
        row, col = tok.end
        if tok.type == token.NAME:
            previous = tok.string
        elif tok.type not in (tokenize.NL, token.NEWLINE, token.INDENT, token.DEDENT):
            previous = None
    advance(len(lines) + 1, 0)
    return "".join(out)


def describe_key(key) -> str:
    """One argument's signature as a reader says it: ``float64[3x4]``, ``float``, ``int = 3``."""
    if key.kind == "array":
        return f"{key.dtype}[{'x'.join(map(str, key.shape)) or '0-d'}]"
    if key.kind == "scalar":
        return f"{key.dtype} scalar"
    if key.kind == "float":
        return "float"
    return f"static {key.value!r}"


def _signature_keys(f):
    """The argument signature the view shows code for, and how it was chosen."""
    g = f
    while g is not None:
        if g._last_key is not None:
            return g._last_key, "last call" if g is f else f"last call of {g.__name__}"
        g = g._parent
    return None, None


class View:
    """Everything both renderings show, gathered once and never raising."""

    def __init__(self, f):
        self.name = f.__name__
        self.params = list(f.params)
        if f._kind == "hvp":   # called as (x, v, *rest)
            x = self.params.pop(f.wrt[0])
            self.params = [x, "v"] + self.params
        wrt = [f.params[i] for i in f.wrt]
        self.wrt = wrt[0] if f._single else "(" + ", ".join(wrt) + ("," if len(wrt) == 1 else "") + ")"
        self.kind = f._kind
        self.target = f.target
        self.source, self.types, self.note = None, None, None
        chain, g = [], f
        while g is not None:   # showing code must not change what .source means later
            chain.append((g, g._last_key))
            g = g._parent
        try:
            keys, how = _signature_keys(f)
            entry = f._inspect_entry()
            keys = keys or f._last_key
            how = how or "guessed before any call, as .source does"
            self.types = ", ".join(f"{p}: {describe_key(k)}" for p, k in zip(self.params, keys))
            self.types += f" ({how})"
            self.source = checked_source(f, entry)
        except Exception as e:  # noqa: BLE001 - a repr never raises; it says what failed
            self.note = (f"argument types unknown until the first call "
                         f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        finally:
            for g, key in chain:
                g._last_key = key

    def rows(self) -> list[tuple[str, str]]:
        rows = [("parameters", ", ".join(self.params)), ("wrt", self.wrt),
                ("target", self.target)]
        if self.kind != "trace":
            rows.insert(0, ("transform", self.kind))
        if self.types:
            rows.append(("argument types", self.types))
        return rows


def to_html(f) -> str:
    view = View(f)
    cells = "".join(f'<tr><th style="text-align:left;padding-right:1em">{html.escape(k)}</th>'
                    f'<td style="text-align:left"><code>{html.escape(v)}</code></td></tr>'
                    for k, v in view.rows())
    parts = [f'<div class="symgrad-function"><p><b>symgrad.Function</b> '
             f'<code>{html.escape(view.name)}({html.escape(", ".join(view.params))})</code></p>',
             f"<table>{cells}</table>"]
    if view.source is not None:
        parts.append('<pre style="line-height:1.3"><code>' + highlight(view.source) + "</code></pre>")
    else:
        parts.append(f"<p><i>{html.escape(view.note)}</i></p>")
    parts.append("</div>")
    return "".join(parts)


def to_markdown(f) -> str:
    view = View(f)
    lines = [f"**symgrad.Function** `{view.name}({', '.join(view.params)})`", ""]
    lines += [f"- {k}: `{v}`" for k, v in view.rows()]
    lines.append("")
    if view.source is not None:
        lines += ["```python", view.source.rstrip("\n"), "```"]
    else:
        lines.append(f"*{view.note}*")
    return "\n".join(lines) + "\n"
