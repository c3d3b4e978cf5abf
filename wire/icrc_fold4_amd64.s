//go:build amd64 && !purego

#include "textflag.h"

// LOAD4 loads the 16 bytes at off of the four packets (SI, DI, R9, R10)
// into the four 128-bit lanes of Z (X its low lane).
#define LOAD4(off, Z, X) \
	VMOVDQU      (SI)(off*1), X \
	VINSERTI32X4 $1, (DI)(off*1), Z, Z \
	VINSERTI32X4 $2, (R9)(off*1), Z, Z \
	VINSERTI32X4 $3, (R10)(off*1), Z, Z

// func clmulRegister4(v *[4]uint64, p *[4]*byte, n int, out *[4]uint32)
//
// clmulRegister on four packets of n bytes at once, packet j in 128-bit lane
// j: the same folds as clmulRegister (one VPCLMULQDQ pair folds block i of
// all four), then, instead of the tables, a reduction by carry-less
// multiplications that takes the four lanes together (see barrett4).
TEXT ·clmulRegister4(SB), NOSPLIT, $0-32
	MOVQ v+0(FP), AX
	MOVQ p+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ out+24(FP), DX
	MOVQ 0(BX), SI
	MOVQ 8(BX), DI
	MOVQ 16(BX), R9
	MOVQ 24(BX), R10
	LEAQ ·foldK(SB), R11
	LEAQ ·foldShuf(SB), R12
	// v and out go word by word, as the caller wrote them and will read
	// them: a wide access to narrow ones just stored, or the reverse,
	// waits for the stores to reach the cache.
	VMOVQ        0(AX), X0
	VMOVQ        8(AX), X3
	VINSERTI32X4 $1, X3, Z0, Z0
	VMOVQ        16(AX), X3
	VINSERTI32X4 $2, X3, Z0, Z0
	VMOVQ        24(AX), X3
	VINSERTI32X4 $3, X3, Z0, Z0
	VPXORQ    Z1, Z1, Z1
	XORQ      R8, R8
	MOVQ      CX, R13
	ANDQ      $15, R13
	JZ        whole4
	LOAD4(R8, Z2, X2)
	VPXORQ          Z0, Z2, Z2
	VBROADCASTI32X4 (R12)(R13*1), Z3
	VPSHUFB         Z3, Z2, Z2
	VBROADCASTI32X4 16(R12)(R13*1), Z3
	VPSHUFB         Z3, Z0, Z0
	MOVQ            R13, R8
	SUBQ            R13, CX
	VBROADCASTI32X4 (R11)(CX*1), Z4
	VPCLMULQDQ      $0x00, Z4, Z2, Z5
	VPCLMULQDQ      $0x11, Z4, Z2, Z6
	VPXORQ          Z5, Z6, Z1

whole4:
	LOAD4(R8, Z2, X2)
	VPXORQ Z0, Z2, Z2

loop4:
	SUBQ            $16, CX
	JZ              last4
	VBROADCASTI32X4 (R11)(CX*1), Z4
	VPCLMULQDQ      $0x00, Z4, Z2, Z5
	VPCLMULQDQ      $0x11, Z4, Z2, Z6
	VPTERNLOGQ      $0x96, Z5, Z6, Z1
	ADDQ            $16, R8
	LOAD4(R8, Z2, X2)
	JMP             loop4

last4:
	VPXORQ Z2, Z1, Z1

	// Each lane of Z1 is a block [L | H]: its CRC register from zero is
	// reflect32(M*x^32 mod P), M = L*x^64 + H. Fold L into the 96-bit
	// Z = L*(x^96 mod P) + H*x^32 (bits 32..127 of the lane), then Z's top
	// 32 bits into the 64-bit W = Zt*(x^64 mod P) + Zb (high qword), then
	// Barrett: q = floor(floor(W/x^32)*mu/x^32), the register the low 32
	// bits of W + q*P.
	LEAQ      ·barrett4(SB), R11
	VMOVDQU64 0(R11), Z4
	VMOVDQU64 64(R11), Z5
	VMOVDQU64 128(R11), Z6
	VMOVDQU64 192(R11), Z7
	VPCLMULQDQ $0x00, Z4, Z1, Z2
	VPSRLDQ    $4, Z1, Z3
	VPXORQ     Z3, Z2, Z2
	VPANDQ     Z6, Z2, Z3
	VPCLMULQDQ $0x10, Z4, Z3, Z3
	VPXORQ     Z2, Z3, Z3
	VPANDQ     Z7, Z3, Z2
	VPCLMULQDQ $0x01, Z5, Z2, Z2
	VPSLLQ     $1, Z2, Z2
	VPANDQ     Z6, Z2, Z2
	VPCLMULQDQ $0x10, Z5, Z2, Z2
	VPSRLQ     $31, Z2, Z2
	VPSRLQ     $32, Z3, Z3
	VPXORQ     Z3, Z2, Z2
	VPEXTRD         $2, X2, 0(DX)
	VEXTRACTI32X4   $1, Z2, X3
	VPEXTRD         $2, X3, 4(DX)
	VEXTRACTI32X4   $2, Z2, X3
	VPEXTRD         $2, X3, 8(DX)
	VEXTRACTI32X4   $3, Z2, X3
	VPEXTRD         $2, X3, 12(DX)
	VZEROUPPER
	RET
