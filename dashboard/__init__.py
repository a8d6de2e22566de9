"""The Streamlit planning workspace (`streamlit run dashboard/app.py`): pages in app_pages/, thin over
engine/ and db/; the numbers pages show come from analysis, their figures from charts, their state from state.
"""
