"""The Streamlit side shared by the pages (dashboard/app_pages/): session state (state, the only module touching
st.session_state), the app's caches and waits (services), the workspace's headline and planning loop (workspace),
UI drawn by several pages (views) and the Tables page's tools (table_tools). With app.py and the pages, the only
code that imports Streamlit."""
