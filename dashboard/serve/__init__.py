"""What runs behind the pages: the planning worker pool and its named tasks (planpool, planwork), background jobs
(jobs), measuring runs (runner), memory housekeeping (housekeeping) and a thread-safe LRU (lru). No Streamlit."""
