#!/usr/bin/env bash
# What tests/test_browser.py needs: Debian's Chromium and Playwright's Python driver. Playwright's
# own browser download is not used (the test launches /usr/bin/chromium via executable_path).
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
python3 -m pip install -q playwright jupyterlab anywidget
