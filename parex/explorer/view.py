"""Small widget helpers of the Explorer: controls, the page's style, suggestion buttons."""

from __future__ import annotations

from html import escape

import ipywidgets as w
import pandas as pd

from ..charts.style import FIT_COLORS
from ..hardware import known_hardware

LOCAL = "cpu-local"
GPU_FOR_BUBBLE = "h100-sxm"  # the profile offered to see a pipeline's bubble
STALE = "parex-stale"  # the class of what shows numbers of a setup that is not the controls' own
STALE_OPACITY = 0.3
# Faded views while the controls are invalid (they show the last valid layout); status colours.
STYLE = f"""<style>
.{STALE} {{ opacity: {STALE_OPACITY}; filter: grayscale(1); transition: opacity 0.2s; }}
.parex-bad {{ color: {FIT_COLORS['does not fit']}; }}
.parex-note {{ color: #555555; font-size: 12px; }}
.parex-badge {{ color: white; padding: 1px 6px; border-radius: 3px; }}
.parex-table td, .parex-table th {{ padding: 2px 8px; text-align: left; font-size: 12px;
  white-space: nowrap; }}
.parex-formulas td, .parex-formulas th {{ padding: 2px 8px; text-align: left; font-size: 12px;
  vertical-align: top; }}
</style>"""


def hardware_names() -> list[str]:
    """Known profiles, the local CPU's first (it exists once `parex calibrate` has run)."""
    names = known_hardware()
    return sorted(names, key=lambda name: name != LOCAL) or [LOCAL]


def dropdown(name: str, options, value, **kw) -> w.Dropdown:
    return w.Dropdown(options=list(options), value=value, description=name,
                      layout=w.Layout(width="210px"), style={"description_width": "90px"}, **kw)


def int_text(name: str, value: int) -> w.BoundedIntText:
    return w.BoundedIntText(value=value, min=1, max=1_000_000, description=name,
                            layout=w.Layout(width="210px"), style={"description_width": "90px"})


class DefaultedInt:
    """A whole-number control that shows the regime's default until the user sets it. Its
    `value` is None while it shows the default, so that the Setting resolves the default
    itself, with what comes along with it (the default batch's microbatch size), and the
    command it prints leaves the flag out, as the user did."""

    def __init__(self, name: str, default: int, value: int | None = None):
        self.name, self.given, self._showing = name, value is not None, False
        self.widget = int_text(name, value if value is not None else default)
        self.widget.observe(self._typed, "value")
        self._label()

    @property
    def value(self) -> int | None:
        return self.widget.value if self.given else None

    def set(self, value: int | None, default: int) -> None:
        """A value of the user's, or (None) back to showing `default`."""
        if value is None:
            self.given = False
            self.show_default(default)
        else:
            self.widget.value = value
            self.given = True
        self._label()

    def show_default(self, default: int) -> None:
        """Show a new default (the hardware or the model changed), unless the user set one."""
        if not self.given:
            self._showing = True
            self.widget.value = default
            self._showing = False

    def _typed(self, change) -> None:
        if not self._showing:
            self.given = True
            self._label()

    def _label(self) -> None:
        self.widget.description = self.name if self.given else f"{self.name} (default)"


def chart_view():
    """An empty chart that updates in place; SVG puts its text into the page, where a browser
    test can read it."""
    import altair as alt

    return alt.JupyterChart(alt.Chart(pd.DataFrame()).mark_point(),
                            embed_options={"renderer": "svg", "actions": False})


def html_view() -> w.HTML:
    return w.HTML(layout=w.Layout(width="100%"))


def pane(*views) -> w.VBox:
    """A plain box around views, to fade them together (set_stale)."""
    return w.VBox(list(views), layout=w.Layout(width="100%"))


def set_stale(views, stale: bool) -> None:
    """Fade `views` (STYLE's STALE class) while what they show is not the controls' setup."""
    for view in views:
        (view.add_class if stale else view.remove_class)(STALE)


def spec_rows(spec: dict | None) -> pd.DataFrame:
    """All inline rows of a Vega-Lite spec (altair puts them under `datasets`)."""
    rows = [row for values in (spec or {}).get("datasets", {}).values() for row in values]
    return pd.DataFrame(rows)


def suggestion_buttons(suggestions, explorer) -> list:
    """A heading and one button per suggestion; a click sets its controls."""
    if not suggestions:
        return []
    heading = ("try one of these valid layouts:" if explorer.error else
               "does not fit. Cheapest changes that fit, by predicted step time:")
    out = [w.HTML(f"<span class='parex-note'>{escape(heading)}</span>")]
    for s in suggestions:
        text = s.text + (f" → {s.note}" if s.note else "")
        button = w.Button(description=text, tooltip=f"set {s.text}",
                          layout=w.Layout(width="auto"), button_style="warning"
                          if not explorer.error else "")
        button.on_click(lambda _, changes=s.changes: explorer.set(**changes))
        out.append(button)
    return out


__all__ = ["GPU_FOR_BUBBLE", "STALE", "STALE_OPACITY", "STYLE", "chart_view", "dropdown",
           "hardware_names", "html_view", "int_text", "pane", "set_stale", "spec_rows",
           "suggestion_buttons"]
