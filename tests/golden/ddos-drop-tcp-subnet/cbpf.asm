(000) ldh      [12]
(001) jeq      #0x800           jt 2	jf 10
(002) ld       #pktlen
(003) jge      #0x22            jt 4	jf 10
(004) ldb      [23]
(005) jeq      #0x6             jt 6	jf 10
(006) ld       [30]
(007) jge      #0xc0a83200      jt 8	jf 10
(008) jgt      #0xc0a832ff      jt 10	jf 9
(009) ret      #0
(010) ret      #262144
