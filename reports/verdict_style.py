"""How each verdict looks on the report pages: its fill and text colour, and its meaning in a few words."""

from __future__ import annotations

COLOURS: dict[str, tuple[str, str]] = {  # background, text: dark text on light fills stays legible in print
    "PASS": ("#c8e6c9", "#1b5e20"), "FAIL": ("#ef9a9a", "#7f0000"), "NON-STRICT": ("#ffe0b2", "#8a4b00"),
    "UNSUPPORTED": ("#e0e0e0", "#424242"), "ERROR": ("#ce93d8", "#4a148c"), "INFO": ("#bbdefb", "#0d47a1"),
}
# the same verdicts' fills in chart bars: stronger than the cell fills, so a thin segment still shows
BAR_COLOURS: dict[str, str] = {
    "PASS": "#66bb6a", "INFO": "#64b5f6", "NON-STRICT": "#ffa726", "UNSUPPORTED": "#bdbdbd", "ERROR": "#ab47bc",
    "FAIL": "#e53935",
}
MEANING: dict[str, str] = {
    "PASS": "observed matches the row", "FAIL": "observed differs from the row",
    "NON-STRICT": "differs, as a profile declares (a known deviation of the broker's, or a client's)",
    "UNSUPPORTED": "the broker lacks what the row needs", "ERROR": "the harness could not complete the case",
    "INFO": "only an informational observation differs",
}
COMPLIANT = ("PASS", "INFO")


def css_class(verdict: str) -> str:
    """The CSS class of a verdict's cell or chip (``v-NON_STRICT``)."""
    return "v-" + verdict.replace("-", "_")
