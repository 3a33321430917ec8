# filter chains available are: input, output
:input;type filter hook input priority 0
:output;type filter hook output priority 0

*arp;test-arp;input,output
