"""Plans turned into what the pages show: numbers (analysis, headline, plan_deltas, measured, whatif,
calibration), differences (plan_diff), plotly figures (charts; figure_cache shares them between sessions),
plan files parsed once (plan_files) and downloads (exports). Pure: no Streamlit."""
