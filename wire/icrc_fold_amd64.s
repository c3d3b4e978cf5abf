//go:build amd64 && !purego

#include "textflag.h"

// FOLD sets X to the block in X moved forward by the constants K (see
// foldK), using T.
#define FOLD(K, X, T) \
	MOVOA     X, T    \
	PCLMULQDQ $0x00, K, X \
	PCLMULQDQ $0x11, K, T \
	PXOR      T, X

// func clmulFold(v uint64, p []byte) (lo, hi uint64)
TEXT ·clmulFold(SB), NOSPLIT, $0-48
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
	PXOR   X2, X1
	MOVQ   X1, AX
	PEXTRQ $1, X1, BX
	MOVQ   AX, lo+32(FP)
	MOVQ   BX, hi+40(FP)
	RET
