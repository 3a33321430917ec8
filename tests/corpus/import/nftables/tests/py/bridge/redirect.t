:prerouting;type filter hook prerouting priority 0

*bridge;test-bridge;prerouting

meta broute set 1;ok
