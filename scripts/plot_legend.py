"""The legend below a figure's axes, shared by plot_loss.py and plot_retrieval.py: a pooled sweep's
legend inside the axes would cover the lines. As many entries per row as fit the figure's width
(at most 3), so that long run names (a pooled report's) are not cut off at its edges. Also the
name that the runs of one configuration share across seeds."""


def seed_group(name):
    # `hylo report` over several seeds names each run "NAME (seed N)" (src/sweep/report.cpp).
    return name.split(" (seed ")[0]


def legend_below(fig, handles, labels, fontsize=8):
    # At fontsize 8 a character is about 0.055 inch; an entry's marker and gaps about 6 more.
    chars_per_row = fig.get_figwidth() / 0.055
    longest = max((len(label) for label in labels), default=1) + 6
    columns = max(1, min(3, len(labels), int(chars_per_row // longest)))
    rows = -(-len(labels) // columns)
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=fontsize, frameon=False)
    fig.tight_layout(rect=(0, 0.05 + 0.04 * rows, 1, 1))
