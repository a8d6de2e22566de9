"""The Tables page's tools: load a preset, import JSON/CSV/TorchRec snippets, bulk edit or delete rows.
UI only; each tool changes the workspace through dashboard.ui.state and reruns the page.
"""

from __future__ import annotations

import streamlit as st

import engine
from dashboard.tables import grid, import_apply, importers, presets, row_checks
from dashboard.ui import state, workspace
from dashboard.text import count_text, md

# Short labels in one row: the import tool is a popover under the toolbar, and with its error it must fit the
# height left there at 1280x720 (issue 28 item 13: the error and the Import button were cut off at 900 px);
# what each format is, is in the paste box's help (IMPORT_HELP).
IMPORT_FORMATS = {"json": "JSON", "csv": "CSV", "torchrec": "TorchRec snippet"}
PASTE_HEIGHT_PX = 100
# CSV columns by their grid names (each is one of the field's CSV names): the required ones, then [the rest]
_CSV_REQUIRED = [f.column for f in grid.GRID_FIELDS if f.csv and f.required]
_CSV_OPTIONAL = [f.column for f in grid.GRID_FIELDS if f.csv and not f.required]
IMPORT_HELP = {
    "json": 'A config file ({"tables": [...], "constraints": {...}, "topology": {...}}) or a list of tables.',
    "csv": f"Header then one table per line: {','.join(_CSV_REQUIRED)}[,{','.join(_CSV_OPTIONAL)}]; lists separated "
           "by ; or |.",
    "torchrec": "Paste Python with EmbeddingBagConfig(...) calls (list comprehensions over range() are fine). "
                "It is read, never run.",
}
BULK_PATTERN = "tables_bulk_pattern"
MAX_NAMED = 5  # tables a delete's confirmation names
# columns a bulk edit sets (fields declaring `bulk`), dim first: the tool opens on it
BULK_COLUMNS = ("dim", *(f.column for f in grid.GRID_FIELDS if f.bulk is not None and f.column != "dim"))


def preset_tool() -> None:
    key = st.selectbox("Preset", list(presets.TABLE_PRESETS), format_func=presets.TABLE_PRESETS.get,
                       key="tables_preset")
    spec = None
    if key == "synthetic":
        c1, c2 = st.columns(2)
        count = c1.number_input("Tables", 1, importers.MAX_TABLES, 200, key="tables_syn_count")
        seed = c2.number_input("Seed", 0, 2**31 - 1, 0, key="tables_syn_seed")
        lo = c1.number_input("Min rows", 1, 10**10, 1_000, key="tables_syn_min_rows")
        hi = c2.number_input("Max rows", 1, 10**10, 10_000_000, key="tables_syn_max_rows")
        spec = presets.SyntheticSpec(count=int(count), min_rows=int(lo), max_rows=int(hi), seed=int(seed))
    with_topology = st.checkbox("Also use the preset's topology", value=key != "synthetic",
                                key="tables_preset_topology")
    if st.button("Load preset", key="tables_load_preset", type="primary"):
        try:
            if key == "synthetic":
                cfg = presets.synthetic(spec, None if with_topology else state.topology())
            else:
                cfg = presets.tutorial() if key == "tutorial" else presets.dlrm_criteo_1tb()
        except ValueError as e:
            st.error(md(e))
            return
        if not with_topology:
            cfg["topology"] = state.topology()
        workspace.note_edit()
        state.set_config(cfg, edit=f"load the preset {presets.TABLE_PRESETS[key]}")
        state.flash(f"Loaded preset: {presets.TABLE_PRESETS[key]} ({count_text(len(cfg['tables']), 'table')}).")
        st.rerun()


def _import_data(fmt: str) -> str | bytes:
    """The file, else the pasted text: side by side, so the tool is short enough to fit under the toolbar."""
    left, right = st.columns([2, 3])
    upload = left.file_uploader("File", type=["json", "csv", "py", "txt"], key="tables_import_file")
    text = right.text_area("...or paste", key="tables_import_text", height=PASTE_HEIGHT_PX, help=IMPORT_HELP[fmt])
    if upload is not None:
        data = upload.getvalue()  # bytes: import_apply checks the size and that it is UTF-8
        # drawn only once the server holds the whole file: the uploader shows a name while it still uploads
        left.caption(f"Ready to import: {md(upload.name)} ({engine.human_bytes(len(data))}).")
        return data
    return text or ""


def refusal_markdown(outcome: import_apply.Outcome) -> str:
    """A refused import as one message: its first line, then one line per problem, the input's names and
    values shown literally (dashboard.text.md)."""
    lines = [outcome.message, *(outcome.problems if len(outcome.problems) > 1 else ())]
    return md("\n".join(lines))


def import_tool() -> None:
    """Format and mode in one row, the file beside the paste box, the error beside the Import button: short
    enough that the popover shows it all under the toolbar at 1440x900 and above it at 1280x720."""
    kind, how = st.columns(2)
    fmt = kind.radio("Format", list(IMPORT_FORMATS), format_func=IMPORT_FORMATS.get, key="tables_import_format",
                     horizontal=True, label_visibility="collapsed")
    mode = how.radio("Tables", ["replace", "append"], horizontal=True, key="tables_import_mode",
                     format_func={"replace": "Replace the tables", "append": "Append to them"}.get,
                     label_visibility="collapsed")
    data = _import_data(fmt)
    run, said = st.columns([1, 4])
    if not run.button("Import", key="tables_import_run", type="primary", width="stretch"):
        return
    outcome = import_apply.run(fmt, data, state.config(), mode)
    if outcome.config is None:
        said.error(refusal_markdown(outcome), icon=":material/error:")
        return
    workspace.note_edit()
    state.set_config(outcome.config, edit=f"import ({mode})")
    state.flash(md(outcome.message))
    st.rerun()


def _bulk_value(column: str):
    label = f"New {grid.LABELS[column]}"
    k = f"tables_bulk_value_{column}"
    f = grid.COLUMN_FIELDS[column]
    if f.kind == engine.FieldKind.INT:
        lo, hi, value = f.bulk
        return int(st.number_input(label, min_value=lo, value=value, step=1, key=k,
                                   **({} if hi is None else {"max_value": hi})))
    if f.kind in (engine.FieldKind.FLOAT, engine.FieldKind.FLOATS):
        lo, hi, value = f.bulk
        return float(st.number_input(label, min_value=lo, value=value, key=k,
                                     **({} if hi is None else {"max_value": hi})))
    options = [m.value for m in f.choices]
    if f.kind == engine.FieldKind.ENUM:
        return st.selectbox(label, options, key=k)
    return st.multiselect(label, options, key=k, help="empty: the planner chooses")


def bulk_tool(rows: list[dict]) -> None:
    state.apply_pending(BULK_PATTERN)  # emptied after each bulk action
    pattern = st.text_input("Tables whose name matches", key=BULK_PATTERN, placeholder="e.g. large_*  (* for all)",
                            help="a glob: * matches all, large_* the names starting with large_")
    hits = grid.matching(rows, pattern)
    st.caption(f"{len(hits)} of {len(rows)} tables match." if pattern.strip() else
               "Type a pattern to pick tables: * picks them all.")
    column = st.selectbox("Set", BULK_COLUMNS, format_func=grid.LABELS.get, key="tables_bulk_column")
    value = _bulk_value(column)
    c1, c2 = st.columns(2)
    if c1.button(f"Apply to {len(hits)}", key="tables_bulk_apply", type="primary", disabled=not hits):
        new_rows, n = grid.bulk_set(rows, pattern, column, value)
        _commit(new_rows, f"Set {grid.LABELS[column]} on {count_text(n, 'table')}.",
                f"set {grid.LABELS[column]} on {count_text(n, 'table')}")
    request = {"positions": hits, "names": [rows[i].get("name") for i in hits]}
    c2.button(f"Delete {len(hits)}...", key="tables_bulk_delete", disabled=not hits,
              on_click=state.set_bulk_delete_request, args=(request,))
    confirm_delete(rows, request)


def confirm_delete(rows: list[dict], request: dict) -> None:
    """The bulk delete asked for, waiting for its confirmation while the pattern still picks the same tables."""
    asked = state.bulk_delete_request()
    if asked is None:
        return
    if asked != request:  # the pattern or the tables changed since: ask again
        state.set_bulk_delete_request(None)
        return
    n, names = len(asked["names"]), [md(x) for x in asked["names"][:MAX_NAMED]]
    more = f" and {n - MAX_NAMED} more" if n > MAX_NAMED else ""
    st.warning(f"Delete {n} table{'s' if n != 1 else ''} ({', '.join(names)}{more})? Undo brings them back.",
               icon=":material/delete:")
    c1, c2 = st.columns(2)
    if c1.button(f"Delete {n}", key="tables_bulk_delete_confirm", type="primary"):
        state.set_bulk_delete_request(None)
        new_rows, n = grid.delete_rows(rows, asked["positions"])
        _commit(new_rows, f"Deleted {count_text(n, 'table')}.", f"delete {count_text(n, 'table')}")
    c2.button("Cancel", key="tables_bulk_delete_cancel", on_click=state.set_bulk_delete_request, args=(None,))


def _commit(rows: list[dict], message: str, edit: str) -> None:
    workspace.note_edit()
    issues, _ = row_checks.row_issues(rows, state.topology())
    state.set_grid_base(rows, row_checks.issue_column(issues, row_checks.row_notes(rows)))
    state.update_config(grid.rows_to_config(rows, state.topology()), edit=edit)
    state.set_pending(BULK_PATTERN, "")
    state.flash(message)
    st.rerun()


def add_table(rows: list[dict]) -> None:
    _commit(rows + [grid.new_table_row(rows)], "Added a table at the end of the grid.", "add a table")
