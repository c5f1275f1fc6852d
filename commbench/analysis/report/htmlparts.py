"""HTML pieces every section of the report's page shares: a value from a results file made inert
between tags, a table of such cells, and a figure embedded as a base64 PNG (no external URL).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from commbench.analysis.report import plot
from commbench.core import outtext

if TYPE_CHECKING:
    from matplotlib.figure import Figure


# --------------------------------------------------------------------------- escaping


def esc(value: Any) -> str:
    """Text from a results file, safe between tags and inside quoted attributes; each line bounded (core/outtext.py)."""
    return html.escape(outtext.lines(value, outtext.LINE_LIMIT), quote=True)


# --------------------------------------------------------------------------- HTML pieces


def table(headers: Sequence[str] | None, rows: Iterable[Sequence[Any]], num: Iterable[int] = (),
           classes: Sequence[Sequence[str]] | None = None) -> str:
    """rows hold plain text (escaped here); classes[i][j] adds a CSS class to a cell; no
    headers: a two-column fact table whose first column is a row header."""
    numbered = set(num)
    out = ["<table>"]
    if headers is not None:
        out.append("<thead><tr>" + "".join(
            f'<th class="num">{esc(h)}</th>' if i in numbered else f"<th>{esc(h)}</th>" for i, h in enumerate(headers))
            + "</tr></thead>")
    out.append("<tbody>")
    for r_i, row in enumerate(rows):
        cells = []
        for i, v in enumerate(row):
            cls = [c for c in (("num" if i in numbered else ""), (classes[r_i][i] if classes else "")) if c]
            attr = f' class="{" ".join(cls)}"' if cls else ""
            tag = "th" if headers is None and i == 0 else "td"
            cells.append(f"<{tag}{attr}>{esc(v)}</{tag}>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def png_data_uri(fig: Figure) -> str:
    return "data:image/png;base64," + base64.b64encode(plot.figure_bytes(fig, "png")).decode("ascii")


def figure_html(fig: Figure, alt: str, caption: str) -> str:
    return f'<figure><img src="{png_data_uri(fig)}" alt="{esc(alt)}"><figcaption>{esc(caption)}</figcaption></figure>'
