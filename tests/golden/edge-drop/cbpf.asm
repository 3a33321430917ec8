(000) ldh      [12]
(001) jeq      #0x800           jt 2	jf 24
(002) ld       #pktlen
(003) jge      #0x22            jt 4	jf 24
(004) ldxb     4*([14]&0xf)
(005) sub      x
(006) jge      #0x12            jt 7	jf 24
(007) ldh      [16]
(008) jge      x                jt 9	jf 24
(009) ldx      #pktlen
(010) add      #14
(011) jgt      x                jt 24	jf 12
(012) ldb      [14]
(013) jge      #0x45            jt 14	jf 24
(014) jgt      #0x4f            jt 24	jf 15
(015) ld       [20]
(016) and      #0x1fff00ff
(017) jeq      #0x11            jt 18	jf 24
(018) ld       [30]
(019) jeq      #0xc0a8004f      jt 20	jf 24
(020) ldxb     4*([14]&0xf)
(021) ldh      [x + 16]
(022) jeq      #0x3039          jt 23	jf 24
(023) ret      #0
(024) ret      #262144
