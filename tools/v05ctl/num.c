/* SPDX-License-Identifier: MIT */
#include "num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * strtod alone accepts leading blanks, hex floats, "inf" and "nan"; none of
 * those is a number a user means on a command line. Allowed: an optional
 * sign, digits with at most one '.', an optional exponent.
 */
static int check_decimal_syntax(const char *s, size_t n)
{
	size_t i = 0, digits = 0;

	if (n == 0)
		return -EINVAL;
	if (s[i] == '+' || s[i] == '-')
		i++;
	while (i < n && s[i] >= '0' && s[i] <= '9')
		i++, digits++;
	if (i < n && s[i] == '.') {
		i++;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++, digits++;
	}
	if (digits == 0)
		return -EINVAL;
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		size_t exp_digits = 0;

		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++, exp_digits++;
		if (exp_digits == 0)
			return -EINVAL;
	}
	return i == n ? 0 : -EINVAL;
}

static int parse_double_n(const char *s, size_t n, double *out)
{
	char buf[128];
	char *end;
	double v;
	int ret;

	ret = check_decimal_syntax(s, n);
	if (ret)
		return ret;
	if (n >= sizeof(buf))
		return -ERANGE;
	memcpy(buf, s, n);
	buf[n] = '\0';
	errno = 0;
	v = strtod(buf, &end);
	if (end != buf + n)
		return -EINVAL;
	/* Underflow to a denormal or 0 is a value; overflow is not. */
	if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1.0))
		return -ERANGE;
	*out = v;
	return 0;
}

int v05ctl_parse_double(const char *s, double *out)
{
	if (!s)
		return -EINVAL;
	return parse_double_n(s, strlen(s), out);
}

int v05ctl_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	if (!s || !s[0])
		return -EINVAL;
	for (; s[i]; i++) {
		unsigned d;

		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int v05ctl_parse_double_list(const char *s, double *out, unsigned max,
			     unsigned *bad_index)
{
	unsigned count = 0;
	const char *p = s;

	if (!s || !s[0]) {
		if (bad_index)
			*bad_index = 0;
		return -EINVAL;
	}
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		int ret;

		if (count == max) {
			if (bad_index)
				*bad_index = count;
			return -E2BIG;
		}
		ret = parse_double_n(p, n, &out[count]);
		if (ret) {
			if (bad_index)
				*bad_index = count;
			return ret;
		}
		count++;
		if (!comma)
			break;
		p = comma + 1;
	}
	return (int)count;
}
