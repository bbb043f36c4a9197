#!/usr/bin/env bash
# Bazel on this checkout, offline (the README's test command runs it): npm's Bazel 2.1.0
# (a binary with its JDK inside) with the WORKSPACE's local stand-ins for the rule sets
# and the checkout's .venv as Python; every target analysed and built, three tests run
# under Bazel (the build's own check and two quick ones). A current Bazel online reads
# MODULE.bazel instead (docs/TESTING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BAZEL=.bazel-npm/node_modules/@bazel/bazel-linux_x64/bazel-2.1.0-linux-x86_64
if [ ! -x "$BAZEL" ]; then
  command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null)
  npm install --prefix .bazel-npm --no-audit --no-fund --silent @bazel/bazel-linux_x64@2.1.0
fi
trap '"$BAZEL" shutdown >/dev/null 2>&1 || true' EXIT
"$BAZEL" build --noshow_progress //...
"$BAZEL" test --noshow_progress //:test_build //:test_sine_tasks //:test_episodes
