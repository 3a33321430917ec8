(000) ldh      [12]
(001) jeq      #0x800           jt 2	jf 26
(002) ld       #pktlen
(003) jge      #0x22            jt 4	jf 26
(004) ldxb     4*([14]&0xf)
(005) sub      x
(006) jge      #0x1c            jt 7	jf 26
(007) ldh      [16]
(008) jge      x                jt 9	jf 26
(009) ldx      #pktlen
(010) add      #14
(011) jgt      x                jt 26	jf 12
(012) ldb      [14]
(013) jge      #0x45            jt 14	jf 26
(014) jgt      #0x4f            jt 26	jf 15
(015) ld       [20]
(016) and      #0x1fff00ff
(017) jeq      #0x6             jt 18	jf 26
(018) ld       [30]
(019) jge      #0xc0a83200      jt 20	jf 26
(020) jgt      #0xc0a832ff      jt 26	jf 21
(021) ldxb     4*([14]&0xf)
(022) ldb      [x + 27]
(023) and      #0x6
(024) jeq      #0x6             jt 25	jf 26
(025) ret      #0
(026) ret      #262144
