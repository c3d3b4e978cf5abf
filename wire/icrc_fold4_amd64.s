//go:build amd64 && !purego

#include "textflag.h"

// SEAL4 writes the four packets' ICRCs (AX, BX, DX, R8) into their last
// four bytes, at CX in each packet (SI, DI, R9, R10).
#define SEAL4 \
	MOVL AX, (SI)(CX*1) \
	MOVL BX, (DI)(CX*1) \
	MOVL DX, (R9)(CX*1) \
	MOVL R8, (R10)(CX*1)

// DIFF4 writes to diff (R11) each packet's ICRC as computed (AX, BX, DX,
// R8) XOR as received (at CX in each packet).
#define DIFF4 \
	XORL (SI)(CX*1), AX \
	MOVL AX, 0(R11) \
	XORL (DI)(CX*1), BX \
	MOVL BX, 4(R11) \
	XORL (R9)(CX*1), DX \
	MOVL DX, 8(R11) \
	XORL (R10)(CX*1), R8 \
	MOVL R8, 12(R11)

// LOAD4 loads the 16 bytes at off of the four packets (SI, DI, R9, R10)
// into the four 128-bit lanes of Z (X its low lane).
#define LOAD4(off, Z, X) \
	VMOVDQU      (SI)(off*1), X \
	VINSERTI32X4 $1, (DI)(off*1), Z, Z \
	VINSERTI32X4 $2, (R9)(off*1), Z, Z \
	VINSERTI32X4 $3, (R10)(off*1), Z, Z

// BARRETT reduces each 128-bit lane of S, a block [L | H] whose CRC
// register from zero is wanted, leaving the register in the third dword of
// each lane of R, using T; K4..K7 hold barrett4's rows. XOR and AND name
// the instructions for the registers' width (VPXORQ and VPANDQ on 512-bit
// registers, which need EVEX; VPXOR and VPAND on 256-bit ones, which
// without AVX512VL must not); the two passes assemble to the same code as
// when each had its own copy. Fold L into the 96-bit Z = L*(x^96 mod P) +
// H*x^32 (bits 32..127 of the lane), then Z's top 32 bits into the 64-bit
// W = Zt*(x^64 mod P) + Zb (high qword), then Barrett: q =
// floor(floor(W/x^32)*mu/x^32), the register the low 32 bits of W + q*P.
#define BARRETT(XOR, AND, K4, K5, K6, K7, S, R, T) \
	VPCLMULQDQ $0x00, K4, S, R \
	VPSRLDQ    $4, S, T \
	XOR        T, R, R \
	AND        K6, R, T \
	VPCLMULQDQ $0x10, K4, T, T \
	XOR        R, T, T \
	AND        K7, T, R \
	VPCLMULQDQ $0x01, K5, R, R \
	VPSLLQ     $1, R, R \
	AND        K6, R, R \
	VPCLMULQDQ $0x10, K5, R, R \
	VPSRLQ     $31, R, R \
	VPSRLQ     $32, T, T \
	XOR        T, R, R

// FOLD4 is the pass over the four packets (SI, DI, R9, R10) of CX bytes, with
// lane j of Z0 XORed into packet j's first eight bytes, R11 and R12 pointing
// at foldK and foldShuf: it leaves packet j's register in the third dword of
// lane j of Z2. It changes CX, R8, R11, R13 and Z0..Z7.
//
// The folds are clmulRegister's (one VPCLMULQDQ pair folds block i of all
// four). Then each lane of Z1 is a block [L | H]: its CRC register from zero
// is reflect32(M*x^32 mod P), M = L*x^64 + H, which BARRETT computes.
#define FOLD4 \
	VPXORQ    Z1, Z1, Z1 \
	XORQ      R8, R8 \
	MOVQ      CX, R13 \
	ANDQ      $15, R13 \
	JZ        whole4 \
	LOAD4(R8, Z2, X2) \
	VPXORQ          Z0, Z2, Z2 \
	VBROADCASTI32X4 (R12)(R13*1), Z3 \
	VPSHUFB         Z3, Z2, Z2 \
	VBROADCASTI32X4 16(R12)(R13*1), Z3 \
	VPSHUFB         Z3, Z0, Z0 \
	MOVQ            R13, R8 \
	SUBQ            R13, CX \
	VBROADCASTI32X4 (R11)(CX*1), Z4 \
	VPCLMULQDQ      $0x00, Z4, Z2, Z5 \
	VPCLMULQDQ      $0x11, Z4, Z2, Z6 \
	VPXORQ          Z5, Z6, Z1 \
whole4: \
	LOAD4(R8, Z2, X2) \
	VPXORQ Z0, Z2, Z2 \
loop4: \
	SUBQ            $16, CX \
	JZ              last4 \
	VBROADCASTI32X4 (R11)(CX*1), Z4 \
	VPCLMULQDQ      $0x00, Z4, Z2, Z5 \
	VPCLMULQDQ      $0x11, Z4, Z2, Z6 \
	VPTERNLOGQ      $0x96, Z5, Z6, Z1 \
	ADDQ            $16, R8 \
	LOAD4(R8, Z2, X2) \
	JMP             loop4 \
last4: \
	VPXORQ Z2, Z1, Z1 \
	LEAQ      ·barrett4(SB), R11 \
	VMOVDQU64 0(R11), Z4 \
	VMOVDQU64 64(R11), Z5 \
	VMOVDQU64 128(R11), Z6 \
	VMOVDQU64 192(R11), Z7 \
	BARRETT(VPXORQ, VPANDQ, Z4, Z5, Z6, Z7, Z1, Z2, Z3)

// func icrc4z(h uint64, pkts *[4][]byte, n int, diff *[4]uint32)
//
// The four-lane pass over four packets of n+4 bytes (BTH to ICRC), v_j the
// header register h with the complement of packet j's byte 4 above it (as
// Set and Check build it): with diff nil it writes each ICRC into the
// packet's last four bytes, else it writes into diff[j] the XOR of packet
// j's ICRC as computed and as received.
TEXT ·icrc4z(SB), NOSPLIT, $0-32
	MOVQ pkts+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ 0(BX), SI
	MOVQ 24(BX), DI
	MOVQ 48(BX), R9
	MOVQ 72(BX), R10
	LEAQ ·foldK(SB), R11
	LEAQ ·foldShuf(SB), R12
	MOVQ h+0(FP), DX
	MOVBLZX 4(SI), AX
	XORL    $0xFF, AX
	SHLQ    $32, AX
	ORQ     DX, AX
	VMOVQ   AX, X0
	MOVBLZX 4(DI), AX
	XORL    $0xFF, AX
	SHLQ    $32, AX
	ORQ     DX, AX
	VMOVQ   AX, X3
	VINSERTI32X4 $1, X3, Z0, Z0
	MOVBLZX 4(R9), AX
	XORL    $0xFF, AX
	SHLQ    $32, AX
	ORQ     DX, AX
	VMOVQ   AX, X3
	VINSERTI32X4 $2, X3, Z0, Z0
	MOVBLZX 4(R10), AX
	XORL    $0xFF, AX
	SHLQ    $32, AX
	ORQ     DX, AX
	VMOVQ   AX, X3
	VINSERTI32X4 $3, X3, Z0, Z0
	FOLD4
	MOVQ    n+16(FP), CX
	VPEXTRD $2, X2, AX
	VEXTRACTI32X4 $1, Z2, X3
	VPEXTRD $2, X3, BX
	VEXTRACTI32X4 $2, Z2, X3
	VPEXTRD $2, X3, DX
	VEXTRACTI32X4 $3, Z2, X3
	VPEXTRD $2, X3, R8
	VZEROUPPER
	NOTL AX
	NOTL BX
	NOTL DX
	NOTL R8
	MOVQ diff+24(FP), R11
	TESTQ R11, R11
	JNE  compare
	SEAL4
	RET

compare:
	DIFF4
	RET

// LOAD2 loads the 16 bytes at off of packets A and B into the two 128-bit
// lanes of Y (X its low lane).
#define LOAD2(off, A, B, Y, X) \
	VMOVDQU     (A)(off*1), X \
	VINSERTI128 $1, (B)(off*1), Y, Y

// FOLDY moves the block in Y forward by the constants in Y4 and XORs it
// into the sum S, using T and U.
#define FOLDY(Y, S, T, U) \
	VPCLMULQDQ $0x00, Y4, Y, T \
	VPCLMULQDQ $0x11, Y4, Y, U \
	VPXOR      T, U, T \
	VPXOR      T, S, S

// VREG puts into lane L of Y (X its low lane) the register v of the packet
// at P: h (DX) with the complement of the packet's byte 4 above it.
#define VREG(P, L, Y, X) \
	MOVBLZX 4(P), AX \
	XORL    $0xFF, AX \
	SHLQ    $32, AX \
	ORQ     DX, AX \
	VMOVQ   AX, X3 \
	VINSERTI128 $L, X3, Y, Y

// func icrc4y(h uint64, pkts *[4][]byte, n int, diff *[4]uint32)
//
// icrc4z's pass on 256-bit registers: packets 0 and 1 (SI, DI) in Y0..Y2,
// packets 2 and 3 (R9, R10) in Y8..Y10, each block's folds of the two
// registers independent of one another.
TEXT ·icrc4y(SB), NOSPLIT, $0-32
	MOVQ pkts+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ 0(BX), SI
	MOVQ 24(BX), DI
	MOVQ 48(BX), R9
	MOVQ 72(BX), R10
	LEAQ ·foldK(SB), R11
	LEAQ ·foldShuf(SB), R12
	MOVQ h+0(FP), DX
	VPXOR Y0, Y0, Y0
	VPXOR Y8, Y8, Y8
	VREG(SI, 0, Y0, X0)
	VREG(DI, 1, Y0, X0)
	VREG(R9, 0, Y8, X8)
	VREG(R10, 1, Y8, X8)
	VPXOR Y1, Y1, Y1
	VPXOR Y9, Y9, Y9
	XORQ  R8, R8
	MOVQ  CX, R13
	ANDQ  $15, R13
	JZ    whole4y

	// A first partial block, as clmulRegister's.
	LOAD2(R8, SI, DI, Y2, X2)
	LOAD2(R8, R9, R10, Y10, X10)
	VPXOR          Y0, Y2, Y2
	VPXOR          Y8, Y10, Y10
	VBROADCASTI128 (R12)(R13*1), Y3
	VPSHUFB        Y3, Y2, Y2
	VPSHUFB        Y3, Y10, Y10
	VBROADCASTI128 16(R12)(R13*1), Y3
	VPSHUFB        Y3, Y0, Y0
	VPSHUFB        Y3, Y8, Y8
	MOVQ           R13, R8
	SUBQ           R13, CX
	VBROADCASTI128 (R11)(CX*1), Y4
	FOLDY(Y2, Y1, Y5, Y6)
	FOLDY(Y10, Y9, Y13, Y14)

whole4y:
	LOAD2(R8, SI, DI, Y2, X2)
	LOAD2(R8, R9, R10, Y10, X10)
	VPXOR Y0, Y2, Y2
	VPXOR Y8, Y10, Y10

loop4y:
	SUBQ           $16, CX
	JZ             last4y
	VBROADCASTI128 (R11)(CX*1), Y4
	FOLDY(Y2, Y1, Y5, Y6)
	FOLDY(Y10, Y9, Y13, Y14)
	ADDQ           $16, R8
	LOAD2(R8, SI, DI, Y2, X2)
	LOAD2(R8, R9, R10, Y10, X10)
	JMP            loop4y

last4y:
	VPXOR   Y2, Y1, Y1
	VPXOR   Y10, Y9, Y9
	LEAQ    ·barrett4(SB), R11
	VMOVDQU 0(R11), Y4
	VMOVDQU 64(R11), Y5
	VMOVDQU 128(R11), Y6
	VMOVDQU 192(R11), Y7
	BARRETT(VPXOR, VPAND, Y4, Y5, Y6, Y7, Y1, Y2, Y3)
	BARRETT(VPXOR, VPAND, Y4, Y5, Y6, Y7, Y9, Y10, Y11)
	MOVQ    n+16(FP), CX
	VPEXTRD $2, X2, AX
	VEXTRACTI128 $1, Y2, X3
	VPEXTRD $2, X3, BX
	VPEXTRD $2, X10, DX
	VEXTRACTI128 $1, Y10, X3
	VPEXTRD $2, X3, R8
	VZEROUPPER
	NOTL AX
	NOTL BX
	NOTL DX
	NOTL R8
	MOVQ diff+24(FP), R11
	TESTQ R11, R11
	JNE  compare4y
	SEAL4
	RET

compare4y:
	DIFF4
	RET

// func cpuid(eax, ecx uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eax+0(FP), AX
	MOVL ecx+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET
