"""Errors that point at the user's source line."""
from __future__ import annotations


class UnsupportedSyntaxError(SyntaxError):
    """A construct symgrad cannot trace. Carries file, line, column, the source line and the
    construct, and prints them like a compiler diagnostic."""

    def __init__(self, construct: str, filename: str = "<unknown>", lineno: int = 0,
                 col: int = 0, source_line: str = "", hint: str = ""):
        self.construct = construct
        self.source_line = source_line
        self.hint = hint
        super().__init__(f"unsupported construct: {construct}",
                         (filename, lineno, col + 1, source_line))
        self.col = col

    def __str__(self) -> str:
        text = f"{self.filename}:{self.lineno}:{self.col + 1}: unsupported construct: {self.construct}"
        if self.source_line:
            stripped = self.source_line.rstrip("\n")
            lead = len(stripped) - len(stripped.lstrip())
            text += f"\n    {stripped.strip()}\n    {' ' * max(0, self.col - lead)}^"
        if self.hint:
            text += f"\n{self.hint}"
        return text
