#!/bin/sh
# Pre-fetches the Kafka broker jars that internal/kafkatest runs, so that a
# later test run needs neither Maven nor the network. The jars go to
# $IVRSCHED_CACHE_DIR/kafka-<version>, or to <user cache dir>/ivrsched/kafka-<version>
# (~/.cache/ivrsched/... on Linux). Needs Go and Maven; a second run is a no-op.
#
# It runs TestFetch, which calls kafkatest.Fetch, so there is one implementation;
# CI=true makes a missing Maven or Java fail the script instead of skipping.
set -eu
cd "$(dirname "$0")/../.."
CI=true exec go test ./internal/kafkatest/ -run '^TestFetch$' -count=1 -v
