:tunnelchain;type filter hook ingress device lo priority 0

*netdev;test-netdev;tunnelchain

tunnel path exists;ok
tunnel path missing;ok
tunnel id 10;ok
