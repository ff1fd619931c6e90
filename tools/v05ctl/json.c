/* SPDX-License-Identifier: MIT */
#include "json.h"

#include <math.h>

void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.17g", v);
	else
		fputs("null", f);
}

void json_bytes(FILE *f, const void *p, size_t n)
{
	const unsigned char *s = p;

	fputc('"', f);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c >= 0x20 && c < 0x7f)
			fputc(c, f);
		else
			fprintf(f, "\\u%04x", c);
	}
	fputc('"', f);
}

void json_str(FILE *f, const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	json_bytes(f, s, n);
}
