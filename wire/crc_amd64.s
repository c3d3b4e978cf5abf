//go:build amd64 && !purego

#include "textflag.h"

// FOLDZ sets acc to the 64 bytes at m XORed with acc's four 128-bit lanes
// each moved forward by the constant pair K (a pair of crcFoldK broadcast to
// every lane), using T.
#define FOLDZ(K, m, acc, T) \
	VPCLMULQDQ $0x00, K, acc, T \
	VPCLMULQDQ $0x11, K, acc, acc \
	VPTERNLOGD $0x96, m, T, acc

// FOLDX sets X to Y XORed with the block in X moved forward by K, using T.
#define FOLDX(K, Y, X, T) \
	VPCLMULQDQ $0x00, K, X, T \
	VPCLMULQDQ $0x11, K, X, X \
	VPTERNLOGD $0x96, Y, T, X

// func crcFold512(r uint32, p []byte) uint32
//
// The raw CRC register run from r over p (len(p) >= 64): r is XORed into
// p's first four bytes and the run starts from a zero register, in which
// the blocks of p are folded forward until one 16-byte block congruent to p
// (placed at its end) is left, and that block reduced.
TEXT ·crcFold512(SB), NOSPLIT, $0-36
	MOVL  r+0(FP), AX
	MOVQ  p_base+8(FP), SI
	MOVQ  p_len+16(FP), CX
	LEAQ  ·crcFoldK(SB), DX
	VMOVD AX, X0 // zeroes the rest of Z0
	VPXORQ (SI), Z0, Z0
	CMPQ  CX, $256
	JB    one

	// Four accumulators: Z0..Z3 hold the 256 bytes at SI-256, each moved
	// 2048 bits forward per step.
	VMOVDQU64       64(SI), Z1
	VMOVDQU64       128(SI), Z2
	VMOVDQU64       192(SI), Z3
	ADDQ            $256, SI
	SUBQ            $256, CX
	VBROADCASTI32X4 0(DX), Z8 // 2048 bits

loop4:
	CMPQ CX, $256
	JB   fold4
	FOLDZ(Z8, (SI), Z0, Z4)
	FOLDZ(Z8, 64(SI), Z1, Z5)
	FOLDZ(Z8, 128(SI), Z2, Z6)
	FOLDZ(Z8, 192(SI), Z3, Z7)
	ADDQ $256, SI
	SUBQ $256, CX
	JMP  loop4

fold4:
	// Z0, Z1 and Z2 onto Z3: 1536, 1024 and 512 bits forward.
	VBROADCASTI32X4 16(DX), Z8
	VBROADCASTI32X4 32(DX), Z9
	VBROADCASTI32X4 48(DX), Z10
	VPCLMULQDQ      $0x00, Z8, Z0, Z4
	VPCLMULQDQ      $0x11, Z8, Z0, Z5
	VPCLMULQDQ      $0x00, Z9, Z1, Z6
	VPCLMULQDQ      $0x11, Z9, Z1, Z7
	VPCLMULQDQ      $0x00, Z10, Z2, Z11
	VPCLMULQDQ      $0x11, Z10, Z2, Z12
	VPTERNLOGD      $0x96, Z4, Z5, Z3
	VPTERNLOGD      $0x96, Z6, Z7, Z11
	VPTERNLOGD      $0x96, Z11, Z12, Z3
	VMOVDQA64       Z3, Z0
	JMP             loop1

one:
	ADDQ $64, SI
	SUBQ $64, CX

loop1:
	// One accumulator: Z0 holds the 64 bytes at SI-64.
	VBROADCASTI32X4 48(DX), Z8 // 512 bits

loop1body:
	CMPQ CX, $64
	JB   lanes
	FOLDZ(Z8, (SI), Z0, Z4)
	ADDQ $64, SI
	SUBQ $64, CX
	JMP  loop1body

lanes:
	// Lanes 0, 1 and 2 of Z0 onto lane 3 (384, 256, 128 bits; lane 3's
	// constants are zero), then the four lanes XORed into X1.
	VMOVDQU64     64(DX), Z8
	VPCLMULQDQ    $0x00, Z8, Z0, Z4
	VPCLMULQDQ    $0x11, Z8, Z0, Z5
	VEXTRACTI32X4 $3, Z0, X1
	VPTERNLOGD    $0x96, Z4, Z5, Z1 // lane 0 of Z1: lane 3 of Z0 and of the products
	VEXTRACTI64X4 $1, Z1, Y4
	VPXORQ        Y4, Y1, Y1
	VEXTRACTI32X4 $1, Y1, X4
	VPXORQ        X4, X1, X1
	VMOVDQU       96(DX), X8 // 128 bits

loop16:
	// X1 is the block at SI-16.
	CMPQ  CX, $16
	JB    partial
	FOLDX(X8, (SI), X1, X4)
	ADDQ  $16, SI
	SUBQ  $16, CX
	JMP   loop16

partial:
	TESTQ CX, CX
	JZ    reduce

	// t = CX (1..15) bytes are left: the 16+t bytes of X1 and them are the
	// first t bytes of X1, which shifted up behind 16-t zero bytes make a
	// block (X3) 16 bytes ahead of the last, and a last block of the rest of
	// X1 shifted down by t bytes with the t bytes after it (from memory, by
	// a byte mask over the 16 bytes that end p) above.
	LEAQ          ·foldShuf(SB), BX
	VPSHUFB       (BX)(CX*1), X1, X3   // foldShuf[t:]: up by 16-t bytes
	VPSHUFB       16(BX)(CX*1), X1, X1 // foldShuf[16+t:]: down by t bytes
	MOVL          $0xFFFF0000, AX
	SHRL          CX, AX               // bits 16-t..15: the top t bytes
	KMOVW         AX, K1
	VMOVDQU8      -16(SI)(CX*1), K1, X1
	FOLDX(X8, X1, X3, X4)
	VMOVDQA64     X3, X1

reduce:
	// X1 is a block [L | H] congruent to p; its register from zero is
	// icrc4's reduction of one lane (see FOLD4 there), here on 128 bits.
	LEAQ       ·barrett4(SB), BX
	VMOVDQU    0(BX), X4
	VMOVDQU    64(BX), X5
	VMOVDQU    128(BX), X6
	VMOVDQU    192(BX), X7
	VPCLMULQDQ $0x00, X4, X1, X2
	VPSRLDQ    $4, X1, X3
	VPXOR      X3, X2, X2
	VPAND      X6, X2, X3
	VPCLMULQDQ $0x10, X4, X3, X3
	VPXOR      X2, X3, X3
	VPAND      X7, X3, X2
	VPCLMULQDQ $0x01, X5, X2, X2
	VPSLLQ     $1, X2, X2
	VPAND      X6, X2, X2
	VPCLMULQDQ $0x10, X5, X2, X2
	VPSRLQ     $31, X2, X2
	VPSRLQ     $32, X3, X3
	VPXOR      X3, X2, X2
	VPEXTRD    $2, X2, AX
	VZEROUPPER
	MOVL       AX, ret+32(FP)
	RET
