:PREROUTING
*mangle
-m rpfilter;=;OK
-m rpfilter --loose --validmark --accept-local --invert;=;OK
