"""The Explorer's pieces that are not widgets: formulas behind each number (explain), ways to
fit in memory or out of an invalid layout (guide), measuring with progress and repeats
(measuring), the Gantt chart's op times (gantt), and the sweep of one control (sweep)."""
