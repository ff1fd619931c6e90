/* SPDX-License-Identifier: MIT */
/* Prints v05_abi() of the shared library it is linked with, for
 * tests/check_abi.py (a program, not ctypes: it loads sanitizer builds of
 * the library too, whose runtime must come first). */
#include <stdio.h>

#include "v05.h"

int main(void)
{
	fputs(v05_abi(), stdout);
	return 0;
}
