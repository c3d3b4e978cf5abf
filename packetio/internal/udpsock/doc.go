// Package udpsock opens and configures the UDP socket that goroce's
// socket-based packet paths (packetio/udp, packetio/uring) share: an
// unconnected IPv4 socket with IP_MTU_DISCOVER=IP_PMTUDISC_DO (DF set,
// Identification 0, which the ICRC covers), IP_PKTINFO, IP_RECVTOS and
// SO_RXQ_OVFL (the kernel's drops) on receive, SO_NO_CHECK (unless Config.Checksum), large (forced when
// allowed) socket buffers and the IPv4 TOS of transmitted packets; and it
// reads the control messages those options produce.
package udpsock
