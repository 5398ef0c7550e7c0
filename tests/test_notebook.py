"""How a Function looks in Jupyter: well-formed HTML and markdown with the generated source;
and, where nbclient/ipykernel are installed (they are not test dependencies), in a real kernel."""
import html
import html.parser
import importlib.util
import pathlib
import re
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.notebook import highlight

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


class _WellFormed(html.parser.HTMLParser):
    """Every tag closed in order; collects the text inside <pre>."""
    VOID = {"br", "hr", "img", "meta", "link", "input"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.pre, self.in_pre = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)
        self.in_pre += tag == "pre"

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()
        self.in_pre -= tag == "pre"

    def handle_data(self, data):
        if self.in_pre:
            self.pre.append(data)


def _parse(text: str) -> _WellFormed:
    parser = _WellFormed()
    parser.feed(text)
    parser.close()
    assert parser.stack == [], f"unclosed tags {parser.stack}"
    return parser


def test_html_is_well_formed_and_shows_the_source():
    f = sg.differentiate(__import__("quickstart_defs").f.fn, wrt=(0, 1))
    f.grad(1.0, 2.0)
    text = f.grad._repr_html_()
    parsed = _parse(text)
    assert "".join(parsed.pre) == f.grad.source          # exactly the source, once unescaped
    for shown in ("grad_f(x, y)", "(x, y)", "cpu", "x: float, y: float"):
        assert html.escape(shown) in text, shown
    assert '<span style="color:#0000c0;font-weight:bold">return</span>' in text


def test_markdown_has_the_signature_and_a_python_block():
    f = sg.differentiate(lambda x: np.sum(np.sin(x) ** 2), target="python")
    f.grad(np.ones((2, 3)))
    text = f.grad._repr_markdown_()
    assert text.startswith("**symgrad.Function** `grad_lambda(x)`") or "grad_<lambda>(x)" in text
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert block == f.grad.source
    assert "- target: `python`" in text and "float64[2x3]" in text


def test_before_any_call_it_shows_what_source_would_and_changes_nothing():
    f = sg.differentiate(lambda x: x * x)
    text = f.grad._repr_markdown_()
    assert "guessed before any call" in text and "def grad_" in text
    assert f.grad._last_key is None and f._last_key is None   # .source still guesses later


def test_never_raises_when_types_cannot_be_guessed():
    def needs_an_int(x, n):
        return x[n:]
    g = sg.grad(needs_an_int)
    for text in (g._repr_html_(), g._repr_markdown_()):
        assert "argument types unknown until the first call" in text
    _parse(g._repr_html_())


def test_highlight_escapes_and_keeps_text():
    source = 'def f(x):\n    # a < b & "c"\n    return x ** 2 if x > 0 else "s<"\n'
    out = highlight(source)
    assert "<b" not in out.replace("<span", "")        # no raw < from the source
    assert html.unescape(re.sub(r"<[^>]+>", "", out)) == source


_HAVE_JUPYTER = all(importlib.util.find_spec(m) is not None for m in ("nbclient", "nbformat", "ipykernel"))


@pytest.mark.skipif(not _HAVE_JUPYTER, reason="nbclient/nbformat/ipykernel not installed")
def test_display_in_a_real_jupyter_kernel(tmp_path):
    import nbformat
    from nbclient import NotebookClient
    cell = ("import numpy as np, symgrad as sg\n"
            "@sg.differentiate\n"
            "def f(x):\n"
            "    return np.sin(x) * x\n"
            "f(0.5)\n"
            "f.grad")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    (result,) = [o for o in nb.cells[0].outputs if o.output_type == "execute_result"]
    shown = result.data["text/html"]
    _parse(shown)
    assert "grad_f(x)" in shown and ">np</span>.cos(x)" in shown and "x: float (last call" in shown
    assert "def grad_f" in result.data["text/markdown"]
