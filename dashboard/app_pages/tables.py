"""Tables & constraints: an editable grid of tables and one of their constraints, with presets, import
and bulk edits; each row's validation error is shown in its own `issue` column.
"""

import streamlit as st

import engine
from dashboard.tables import grid, row_checks
from dashboard.ui import state, table_tools, views, workspace
from dashboard.text import count_text, md

SUMMARY_LINES = 5  # rows listed above the grids; the rest are counted

ISSUE_COLUMN = st.column_config.TextColumn("⚠ issue", disabled=True, width=240)  # narrow: rows and dim stay in view
ROW_COLUMN = st.column_config.NumberColumn("row", disabled=True, width=50, help="row number, as messages name rows")
K = engine.FieldKind


def field_column(f: engine.Field):
    """A grid column's editor, from its field's declaration (engine.fields): label, width, help, choices."""
    kw = {"width": f.width}
    if f.help:
        kw["help"] = f.help
    if f.kind == K.ENUM:
        return st.column_config.SelectboxColumn(f.grid_label, options=[m.value for m in f.choices], **kw)
    if f.kind == K.ENUMS:
        return st.column_config.MultiselectColumn(f.grid_label, options=[m.value for m in f.choices], **kw)
    if f.kind in (K.INT, K.FLOAT, K.FLOATS):
        step = {"step": 1} if f.kind == K.INT else {}
        return st.column_config.NumberColumn(f.grid_label, **step, format=f.number_format, **kw)
    if f.required:
        kw["required"] = True
    return st.column_config.TextColumn(f.grid_label, **kw)


TABLE_COLUMN_CONFIG = {
    "_index": ROW_COLUMN,
    **{c: field_column(grid.COLUMN_FIELDS[c]) for c in grid.TABLE_COLUMNS if c in grid.COLUMN_FIELDS},
    "issue": ISSUE_COLUMN,
}
CONSTRAINT_COLUMN_CONFIG = {
    "_index": ROW_COLUMN,
    "table": st.column_config.TextColumn("table", disabled=True, width=150),
    **{c: field_column(grid.COLUMN_FIELDS[c]) for c in grid.CONSTRAINT_COLUMNS if c in grid.COLUMN_FIELDS},
    "issue": ISSUE_COLUMN,
}


def column_order(columns: tuple[str, ...], issues: list[str]) -> list[str]:
    """The issue column sits right after the table's name, and only while some row has an issue."""
    rest = [c for c in columns if c != "issue"]
    return [rest[0], "issue", *rest[1:]] if any(issues) else rest


def current_rows() -> tuple[list[dict], list[str], list[dict], list[dict], list[str], list[str], str | None]:
    """(base rows and their issue column, rows after table edits, rows after all edits, issues to fix, the
    issue column (issues and notes), error outside the grid); folds the edits into new base rows when rows were
    added or removed, constraints edited, or the issue column changed."""
    base, base_column = state.grid_base()
    t_delta = state.widget(state.TABLES_GRID)
    after_tables = grid.apply_edits(base, t_delta)
    c_delta = state.widget(state.CONSTRAINTS_GRID)
    rows = grid.apply_edits(after_tables, c_delta, allow_structure=False)
    issues, outside = row_checks.row_issues(rows, state.topology())
    column = row_checks.issue_column(issues, row_checks.row_notes(rows))
    if grid.changes_structure(t_delta) or (c_delta or {}).get("edited_rows") or column != base_column:
        state.set_grid_base(rows, column)
        base, base_column, after_tables = rows, column, rows
    state.update_config(grid.rows_to_config(rows, state.topology()))
    return base, base_column, after_tables, rows, issues, column, outside


def header(rows: list[dict], issues: list[str], outside: str | None) -> None:
    topo = state.topology()
    st.caption(f"{count_text(len(rows), 'table')} · {engine.human_bytes(grid.weight_bytes(rows))} of weights · "
               f"{md(topo.get('world_size', '?'))} ranks{md(hosts_text(topo))} "
               f"({md(topo.get('compute_device', 'cuda'))})")
    lines = row_checks.issue_lines(rows, issues)
    if lines:
        listed = "\n".join(f"- {md(line)}" for line in lines[:SUMMARY_LINES])
        more = f"\n- and {len(lines) - SUMMARY_LINES} more" if len(lines) > SUMMARY_LINES else ""
        st.error(f"**{len(lines)} table{'s' if len(lines) != 1 else ''} to fix before planning** (each row's "
                 f"problems are in its ⚠ issue column):\n{listed}{more}", icon=":material/error:")
    if outside and outside.startswith("Topology"):
        st.warning(f"{md(outside)} (fix it on the Topology page)", icon=":material/warning:")
    elif outside:
        st.error(md(outside), icon=":material/error:")


def hosts_text(topo: dict) -> str:
    """" on N hosts" when the topology says so plainly (the ranks split evenly over them)."""
    ws, lws = topo.get("world_size"), topo.get("local_world_size", topo.get("world_size"))
    if isinstance(ws, int) and isinstance(lws, int) and 0 < lws <= ws and ws % lws == 0:
        hosts = ws // lws
        return f" on {hosts} host{'s' if hosts != 1 else ''}"
    return ""


# The toolbar's tools are fragments: their inputs (a preset's table count and seed, an import's format and text, a
# bulk edit's pattern and value) rerun the tool only, not the page's two grids and its headline; a tool that
# changes the workspace reruns the whole app (st.rerun in dashboard.ui.table_tools).
@st.fragment
def preset_tool() -> None:
    table_tools.preset_tool()


@st.fragment
def import_tool() -> None:
    table_tools.import_tool()


@st.fragment
def bulk_tool(rows: list[dict]) -> None:  # rows of the page's last full run: every grid edit is one
    table_tools.bulk_tool(rows)


def toolbar(rows: list[dict]) -> None:
    bar = st.container(horizontal=True)
    with bar.popover("Presets", icon=":material/library_books:"):
        preset_tool()
    with bar.popover("Import", icon=":material/upload:"):
        import_tool()
    with bar.popover("Bulk edit", icon=":material/edit_note:"):
        bulk_tool(rows)
    if bar.button("Add table", key="tables_add", icon=":material/add:"):
        table_tools.add_table(rows)
    workspace.undo_button(bar, "tables_undo")


st.title("Tables & constraints")
views.workspace_headline()
views.show_flash()
base_rows, base_column, table_rows, all_rows, row_issues, issue_texts, topology_error = current_rows()
header(all_rows, row_issues, topology_error)
toolbar(all_rows)
tab_tables, tab_constraints = st.tabs([f"Tables ({len(all_rows)})", "Constraints"])
with tab_tables:
    st.data_editor(grid.tables_frame(base_rows, base_column), key=state.TABLES_GRID, num_rows="dynamic",
                   on_change=workspace.note_edit,
                   hide_index=False, height=grid.grid_height(len(base_rows), True),
                   column_config=TABLE_COLUMN_CONFIG, placeholder="",
                   column_order=column_order(grid.TABLE_COLUMNS, base_column))
with tab_constraints:
    st.caption("Per-table constraints, as TorchRec's ParameterConstraints: empty cells leave the choice to the "
               "planner. Add or delete tables on the Tables tab.")
    if any(row_issues):
        st.caption(f"⚠ {row_checks.rows_text([i for i, t in enumerate(row_issues) if t])} to fix: see the issue column "
                   "and the list above.")
    st.data_editor(grid.constraints_frame(table_rows, issue_texts), key=state.CONSTRAINTS_GRID, num_rows="fixed",
                   on_change=workspace.note_edit,
                   hide_index=False, height=grid.grid_height(len(table_rows), False),
                   column_config=CONSTRAINT_COLUMN_CONFIG, placeholder="",
                   column_order=column_order(grid.CONSTRAINT_COLUMNS, issue_texts))
