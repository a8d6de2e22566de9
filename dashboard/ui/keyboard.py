"""Keyboard reach the widgets lack, added once per page: Tab from an open popover's button goes into the popover.

Streamlit 1.67 draws a popover's body in a portal at the end of the page, so after Enter opens one, Tab went on to
the next button and through the whole page (17 presses on the Tables page) before it reached the popover's first
control. A static script (no user data in it) sends that Tab into the open popover; Escape already closes it and
gives the focus back to its button.
"""

from __future__ import annotations

import streamlit as st

POPOVER_TAB = """<script>
(() => {
  if (window.__plannerPopoverTab) return;
  window.__plannerPopoverTab = true;
  const FOCUSABLE = 'input:not([disabled]), textarea:not([disabled]), button:not([disabled]), select:not([disabled]),'
    + ' [tabindex]:not([tabindex="-1"])';
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Tab' || event.shiftKey || event.altKey || event.ctrlKey || event.metaKey) return;
    const button = document.activeElement;
    if (!button || button.getAttribute('data-testid') !== 'stPopoverButton'
        || button.getAttribute('aria-expanded') !== 'true') return;
    const bodies = document.querySelectorAll('[data-testid="stPopoverBody"]');
    const first = bodies.length ? bodies[bodies.length - 1].querySelector(FOCUSABLE) : null;
    if (first) {
      event.preventDefault();
      first.focus();
    }
  }, true);
})();
</script>"""


def popover_tab() -> None:
    """The script above, on this page (it adds its listener once per browser tab)."""
    st.html(POPOVER_TAB, unsafe_allow_javascript=True)
