"""Small helpers for the report's inline SVG: a text element and how wide a text will be drawn.

No plotting library and no font metrics at run time: :func:`text_width` over-estimates the width of a line in
the page's sans-serif font, so a chart that sizes its label column with it never cuts a label.
"""

from __future__ import annotations

from html import escape

# widest average advance of DejaVu Sans / Arial per em, rounded up (DejaVu Sans's lower case averages ~0.55 em)
EM_ADVANCE = 0.62


def text_width(text: str, size: float) -> float:
    """An upper bound, in pixels, of the width ``text`` takes at font size ``size`` in the page's font."""
    return len(text) * size * EM_ADVANCE


def text(x: float, y: float, content: str, anchor: str = "start", size: int = 12, extra: str = "") -> str:
    """One ``<text>`` element, its content escaped."""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" {extra}>'
            f"{escape(content)}</text>")
