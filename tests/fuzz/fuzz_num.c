/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: v05ctl's number parsing over arbitrary strings (every
 * option value a user or a script passes). Whatever the bytes: an accepted
 * double is finite, spelled as plain decimal (sign, digits, one '.', an
 * exponent) and equal to what strtod makes of it; an accepted integer is
 * all digits, at most its bound, and equal to strtoull's; a list's count
 * and entries agree with parsing its pieces one by one; a rejection is
 * -EINVAL, -ERANGE or -E2BIG and writes nothing past the list's bound.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "num.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_num: invariant broken: %s\n", what);
		abort();
	}
}

static int plain_decimal(const char *s)
{
	size_t i = 0, digits = 0;

	if (s[i] == '+' || s[i] == '-')
		i++;
	for (; s[i] >= '0' && s[i] <= '9'; i++)
		digits++;
	if (s[i] == '.')
		for (i++; s[i] >= '0' && s[i] <= '9'; i++)
			digits++;
	if (!digits)
		return 0;
	if (s[i] == 'e' || s[i] == 'E') {
		size_t e = 0;

		i++;
		if (s[i] == '+' || s[i] == '-')
			i++;
		for (; s[i] >= '0' && s[i] <= '9'; i++)
			e++;
		if (!e)
			return 0;
	}
	return s[i] == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* One guard entry past the list's bound of 8. */
	double list[9], one, v;
	char *s = malloc(size + 1);
	uint64_t u, max;
	unsigned bad = 99;
	int n, ret;

	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';

	ret = v05ctl_parse_double(s, &v);
	check(ret == 0 || ret == -EINVAL || ret == -ERANGE, "double: errno");
	if (ret == 0) {
		check(isfinite(v), "double: finite");
		check(plain_decimal(s), "double: plain decimal only");
		check(v == strtod(s, NULL), "double: equals strtod");
	}

	max = size ? (uint64_t)data[0] * 1000003u : 0;
	ret = v05ctl_parse_u64(s, max, &u);
	check(ret == 0 || ret == -EINVAL || ret == -ERANGE, "u64: errno");
	if (ret == 0) {
		check(u <= max, "u64: bounded");
		check(s[0] != '\0' && strspn(s, "0123456789") == strlen(s),
		      "u64: digits only");
		check(u == strtoull(s, NULL, 10), "u64: equals strtoull");
	}

	list[8] = 12345.0;
	n = v05ctl_parse_double_list(s, list, 8, &bad);
	check(list[8] == 12345.0, "list: nothing written past the bound");
	check(n >= 0 || n == -EINVAL || n == -ERANGE || n == -E2BIG,
	      "list: errno");
	if (n >= 0) {
		const char *p = s;

		check(n >= 1 && n <= 8, "list: count");
		for (int i = 0; i < n; i++) {
			const char *comma = strchr(p, ',');
			size_t len = comma ? (size_t)(comma - p) : strlen(p);
			char piece[256];

			check(len < sizeof(piece), "list: entry length");
			memcpy(piece, p, len);
			piece[len] = '\0';
			check(v05ctl_parse_double(piece, &one) == 0 && one == list[i],
			      "list: entry equals its piece");
			p = comma ? comma + 1 : p + len;
		}
	} else {
		check(bad <= 8, "list: names the bad entry");
	}
	free(s);
	return 0;
}
