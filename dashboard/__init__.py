"""The Streamlit planning workspace (`streamlit run dashboard/app.py`), thin over engine/ and db/, in folders by
role: app_pages/ (one file per page), ui/ (Streamlit shared by the pages: state, caches, views), plans/ (numbers
and figures of plans), tables/ (rows, checks, imports, presets), serve/ (worker pool, jobs, runs). text.py makes
user text safe and numbers readable. docs/architecture.md has the map.
"""
