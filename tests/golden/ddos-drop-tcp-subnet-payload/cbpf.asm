(000) ldh      [12]
(001) jeq      #0x800           jt 2	jf 35
(002) ld       #pktlen
(003) jge      #0x22            jt 4	jf 35
(004) ldxb     4*([14]&0xf)
(005) sub      x
(006) jge      #0x1b            jt 7	jf 35
(007) ldh      [16]
(008) jge      x                jt 9	jf 35
(009) ldx      #pktlen
(010) add      #14
(011) jgt      x                jt 35	jf 12
(012) ldb      [14]
(013) jge      #0x45            jt 14	jf 35
(014) jgt      #0x4f            jt 35	jf 15
(015) ld       [20]
(016) and      #0x1fff00ff
(017) jeq      #0x6             jt 18	jf 35
(018) ld       [30]
(019) jge      #0xc0a83200      jt 20	jf 35
(020) jgt      #0xc0a832ff      jt 35	jf 21
(021) ldxb     4*([14]&0xf)
(022) ldb      [x + 26]
(023) jge      #0x50            jt 24	jf 35
(024) and      #0xf0
(025) rsh      #2
(026) add      x
(027) tax      
(028) ld       #pktlen
(029) sub      x
(030) jge      #0x10            jt 31	jf 35
(031) jset     #0x80000000      jt 35	jf 32
(032) ldb      [x + 15]
(033) jeq      #0x58            jt 34	jf 35
(034) ret      #0
(035) ret      #262144
