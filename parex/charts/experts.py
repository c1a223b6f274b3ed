"""A mixture of experts' router: each expert's share of the token assignments, per layout."""

from __future__ import annotations

import altair as alt
import pandas as pd


def expert_load_chart(study: pd.DataFrame, width: int = 360) -> alt.Chart:
    """Bars of each expert's share of the assignments on the last step, one panel per layout of
    an experts study (parex.studies.expert_study); the rule is the balanced share 1/E."""
    rows = [{"layout": r.layout, "expert": e, "share": share}
            for r in study.itertuples() for e, share in enumerate(r.expert_load)]
    frame = pd.DataFrame(rows)
    experts = frame["expert"].nunique()
    bars = alt.Chart().mark_bar().encode(
        x=alt.X("expert:O", title="expert"),
        y=alt.Y("share:Q", title="share of assignments", axis=alt.Axis(format="%")),
        tooltip=["layout:N", "expert:O", alt.Tooltip("share:Q", format=".1%")])
    even = alt.Chart().mark_rule(strokeDash=[4, 3], color="#555555").encode(
        y=alt.datum(1 / experts))
    return alt.layer(bars, even, data=frame).properties(width=width, height=160).facet(
        row=alt.Row("layout:N", title=None))


__all__ = ["expert_load_chart"]
