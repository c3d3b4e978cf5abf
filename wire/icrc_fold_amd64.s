//go:build amd64 && !purego

#include "textflag.h"

// FOLD sets X to the block in X moved forward by the constants K (see
// foldK), using T.
#define FOLD(K, X, T) \
	MOVOA     X, T    \
	PCLMULQDQ $0x00, K, X \
	PCLMULQDQ $0x11, K, T \
	PXOR      T, X

// LOOKUP XORs into acc the entry of table crcTables[t] (at DI) that the
// byte register b indexes.
#define LOOKUP(b, t, acc) \
	MOVBLZX b, SI \
	XORL    (t*1024)(DI)(SI*4), acc

// func clmulRegister(v uint64, p []byte) uint32
TEXT ·clmulRegister(SB), NOSPLIT, $0-36
	MOVQ  v+0(FP), X0
	MOVQ  p_base+8(FP), SI
	MOVQ  p_len+16(FP), CX
	LEAQ  ·foldK(SB), DX
	LEAQ  ·foldShuf(SB), BX
	PXOR  X1, X1 // the sum of the blocks moved to the last one's place
	MOVQ  CX, AX
	ANDQ  $15, AX
	JZ    whole

	// len(p) is not a multiple of 16: the first o = len(p)%16 bytes, with v
	// XORed in, make a block with 16-o zero bytes in front (which do not
	// change a CRC run from a zero register), and the blocks after start at
	// p[o:], the rest of v XORed into the first.
	MOVOU  (SI), X2
	PXOR   X0, X2
	MOVOU  (BX)(AX*1), X3   // foldShuf[o:]: shift up by 16-o bytes
	PSHUFB X3, X2
	MOVOU  16(BX)(AX*1), X3 // foldShuf[16+o:]: shift down by o bytes
	PSHUFB X3, X0
	ADDQ   AX, SI
	SUBQ   AX, CX
	MOVOU  (DX)(CX*1), X4   // foldK[(len(p)-o)/16]
	FOLD(X4, X2, X5)
	MOVOA  X2, X1

whole:
	MOVOU (SI), X2
	PXOR  X0, X2

loop:
	// X2 is the block at SI; CX counts the bytes from it to the end.
	SUBQ  $16, CX
	JZ    last
	MOVOU (DX)(CX*1), X4 // foldK[CX/16]
	FOLD(X4, X2, X5)
	PXOR  X2, X1
	ADDQ  $16, SI
	MOVOU (SI), X2
	JMP   loop

last:
	PXOR X2, X1

	// The register is the CRC of the 16 bytes of X1 from zero: crc16(0, lo,
	// hi) with four accumulators.
	MOVQ   X1, AX
	PEXTRQ $1, X1, BX
	LEAQ   ·crcTables(SB), DI
	XORL   R8, R8
	XORL   R9, R9
	XORL   R10, R10
	XORL   R11, R11
	MOVQ   AX, CX
	SHRQ   $32, CX
	MOVQ   BX, DX
	SHRQ   $32, DX
	LOOKUP(AL, 15, R8)
	LOOKUP(AH, 14, R9)
	LOOKUP(CL, 11, R10)
	LOOKUP(CH, 10, R11)
	LOOKUP(BL, 7, R8)
	LOOKUP(BH, 6, R9)
	LOOKUP(DL, 3, R10)
	LOOKUP(DH, 2, R11)
	SHRL   $16, AX
	SHRL   $16, CX
	SHRL   $16, BX
	SHRL   $16, DX
	LOOKUP(AL, 13, R8)
	LOOKUP(AH, 12, R9)
	LOOKUP(CL, 9, R10)
	LOOKUP(CH, 8, R11)
	LOOKUP(BL, 5, R8)
	LOOKUP(BH, 4, R9)
	LOOKUP(DL, 1, R10)
	LOOKUP(DH, 0, R11)
	XORL   R9, R8
	XORL   R11, R10
	XORL   R10, R8
	MOVL   R8, ret+32(FP)
	RET
