"""Save & share: save the current plan with a label and get its share link (?plan=TOKEN, read-only in any
browser that reaches this app); the saved plans; bundles to move a plan to another database.
"""

import json
import os

import pandas as pd
import streamlit as st

import engine
from dashboard import text
from dashboard.plans import exports
from dashboard.ui import services, state, views
from dashboard.text import md
from db.bundle import read_bundle_text
from db.store import StoreError

PUBLIC_URL_ENV = "PLANNER_PUBLIC_URL"  # the app's address as others reach it (behind a proxy), if not the browser's


def link_for(token: str) -> str:
    return exports.share_link(token, os.environ.get(PUBLIC_URL_ENV, "").strip(), st.context.url,
                              str(st.get_option("server.baseUrlPath") or ""))


AUTHOR, CONFIG_NAME = "save_author", "save_config_name"  # kept across pages (state.kept)


def saving_line(current) -> str:
    """Which plan the form saves (markdown): whose planner made it, its size and slowest rank."""
    n, w = len(current.plan.tables), current.config.topology.world_size
    return (f"Saving the current plan by **{md(services.planner_label(current.planner))}**: {n:,} "
            f"table{'' if n == 1 else 's'} on {w:,} rank{'' if w == 1 else 's'}, slowest rank "
            f"{md(text.ms_text(current.plan.max_rank_cost_ms))}.")


def save_form(store, current) -> None:
    n, w = len(current.plan.tables), current.config.topology.world_size
    st.markdown(saving_line(current))
    label = st.text_input("Label", value=current.label or f"{n} tables on {w} ranks", key="save_label", max_chars=200)
    c1, c2 = st.columns(2)
    author = c1.text_input("Author", value=state.kept(AUTHOR, ""), key=AUTHOR, max_chars=200)
    config_name = c2.text_input("Config name", value=state.kept(CONFIG_NAME, "untitled"), key=CONFIG_NAME,
                                max_chars=200,
                                help="saving a changed config under the same name makes a new version of it")
    state.remember(AUTHOR, author)
    state.remember(CONFIG_NAME, config_name)
    if st.button("Save plan", type="primary", key="save_run", icon=":material/save:"):
        try:
            token = store.save_plan(engine.config_to_dict(current.config), engine.plan_to_dict(current.plan),
                                    label=label, author=author,
                                    config_name=config_name or "untitled", settings=current.settings)
        except StoreError as e:
            st.error(f"Not saved: {md(e)}", icon=":material/error:")
            return
        state.mark_saved(token, label)
        state.set_widget("save_link_pick", token)  # the link to copy: the plan just saved
        state.flash(f"Saved '{md(label)}'.")
        st.rerun()


def share_box(current) -> None:
    url = link_for(current.token)
    st.markdown(f"**Share link** of '{md(current.label)}' (opens it read-only):")
    st.code(url, language=None)
    st.link_button("Open the share link", url, icon=":material/open_in_new:")


def saved_list(plans: list, current) -> None:
    st.subheader("Saved plans", divider="gray")
    if not plans:
        st.caption("Nothing saved yet.")
        return
    links = {p.token: link_for(p.token) for p in plans}
    frame = pd.DataFrame([{  # the link second: whole and in view, without scrolling the grid
        "label": p.label or "(no label)", "share link": links[p.token], "author": p.author,
        "saved (UTC)": p.created_at.strftime("%Y-%m-%d %H:%M"), "planner": services.planner_label(p.planner),
        "config": f"{p.config_name} v{p.config_version}", "tables": p.num_tables, "ranks": p.world_size,
        "slowest rank": p.max_rank_cost_ms} for p in plans])
    st.dataframe(frame, hide_index=True, key="save_list", height=min(38 + 35 * len(frame), 360),
                 column_config={"share link": st.column_config.LinkColumn("share link", width="large"),
                                "slowest rank": st.column_config.NumberColumn(format="%.3g ms")})
    tokens = list(links)
    mine = current.token if current is not None and current.token in links else tokens[0]
    token = st.selectbox("Share link of", tokens, index=tokens.index(mine), key="save_link_pick",  # plain text
                         format_func=lambda t: next(f"{p.label or '(no label)'} · {p.created_at:%Y-%m-%d %H:%M}"
                                                    for p in plans if p.token == t))
    st.code(links[token], language=None)
    st.caption("The copy button at the right of the link copies it; anyone who reaches this app opens the plan "
               "read-only from it.")


def bundles(store, plans: list) -> None:
    with st.expander("Move a plan to another database (bundle)"):
        if plans:
            token = st.selectbox("Plan", [p.token for p in plans], key="save_bundle_pick",  # options: plain text
                                 format_func=lambda t: next(p.label or t for p in plans if p.token == t))
            st.download_button("Download bundle", lambda: json.dumps(store.export_bundle(token), indent=1),
                               f"plan-{token[:8]}.bundle.json", "application/json", key="save_bundle_export",
                               on_click="ignore")
        upload = st.file_uploader("Import a bundle", type=["json"], key="save_bundle_file")
        if upload is not None and st.button("Import bundle", key="save_bundle_import"):
            try:
                token = store.import_bundle(read_bundle_text(upload.getvalue(), "the uploaded bundle"))
            except (StoreError, ValueError) as e:
                st.error(f"Not imported: {md(e)}")
            else:
                st.success(f"Imported: {md(link_for(token))}")


st.title("Save & share")
views.show_flash()
store = services.store()
current = state.plan()
if current is None:
    st.info("No plan to save yet: make one on the Plan page.", icon=":material/info:")
    st.page_link("app_pages/plan.py", label="Go to Plan", icon=":material/insights:")
else:
    if not current.matches(state.config()):
        st.warning("The config changed since this plan was made: this saves the plan with the config it was made "
                   "for.", icon=":material/update:")
    views.calibrated_note(current.settings, current.config)
    save_form(store, current)
    if current.token:
        share_box(current)
saved = store.list_plans()  # once per run: one SELECT of the summary columns, no plan JSON
saved_list(saved, current)
bundles(store, saved)
