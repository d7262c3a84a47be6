#!/usr/bin/env bash
# The test command's partitions check (issue 24): scripts/jepsen.sh --short,
# every nemesis once under load on a 3-node cluster in network namespaces,
# about 60 s. Needs root, as CI runs.
exec "$(dirname "$0")/jepsen.sh" --short "$@"
