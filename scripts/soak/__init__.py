"""The soak harness of scripts/soak.sh: a 3-node cluster under mixed load for
MINUTES, sampled every minute, judged for leaks and lost messages."""
