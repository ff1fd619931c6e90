/* SPDX-License-Identifier: MIT */
/*
 * A mode's rule run without a plugin, through its row of the rule table
 * (rule.h, table.c): the parameters checked (the common checks, then the
 * row's), the mode by name, and the calls that take a struct v05_params:
 * v05_estimate, v05_keep, v05_decide. No mode is named here.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rule.h"
#include "stats_core.h"
#include "../../shm/error.h"

V05_API int v05_params_check(const struct v05_params *p)
{
	const struct v05__rule *r;

	if (!p)
		return v05__fail(-EINVAL, "params: NULL");
	if (!isfinite(p->cost) || p->cost <= 0.0 || p->cost >= 1.0)
		return v05__fail(-EINVAL, "cost %g is not in (0, 1)", p->cost);
	if (p->k_init < 1)
		return v05__fail(-EINVAL, "k_init %u is below 1", p->k_init);
	if (p->k_step < 1)
		return v05__fail(-EINVAL, "k_step %u is below 1", p->k_step);
	if (p->k_max > V05_K_LIMIT)
		return v05__fail(-EINVAL, "k_max %u is above %u", p->k_max,
				 V05_K_LIMIT);
	if (p->k_init > p->k_max)
		return v05__fail(-EINVAL, "k_init %u is above k_max %u",
				 p->k_init, p->k_max);
	/* A step past k_max can never be taken, and a huge one would wrap
	 * the u32 sum k + k_step that the stopping rule compares. */
	if (p->k_step > p->k_max)
		return v05__fail(-EINVAL, "k_step %u is above k_max %u",
				 p->k_step, p->k_max);
	r = v05__rule_of(p->mode);
	if (!r)
		return v05__fail(-EINVAL, "mode %u is unknown", p->mode);
	if (p->sigma >= V05_SIGMA_COUNT)
		return v05__fail(-EINVAL, "sigma %u is not rms (0) or paper (1)",
				 p->sigma);
	if (!r->keep && p->keep_n)
		return v05__fail(-EINVAL,
				 "keep_n %u: only reinforce-ada keeps part of a group (give 0)",
				 p->keep_n);
	return r->check_params ? r->check_params(r, p) : 0;
}

V05_API const char *v05_mode_name(uint32_t mode)
{
	const struct v05__rule *r = v05__rule_of(mode);

	return r ? r->name : NULL;
}

V05_API int v05_mode_from_name(const char *name)
{
	char names[512];
	size_t at = 0;

	for (uint32_t m = 0; name && m < V05_MODE_COUNT; m++)
		if (strcmp(name, v05__rule_of(m)->name) == 0)
			return (int)m;
	names[0] = 0;
	for (uint32_t m = 0; m < V05_MODE_COUNT && at < sizeof(names); m++)
		at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s",
				       m ? ", " : "", v05__rule_of(m)->name);
	return v05__fail(-EINVAL, "mode '%s' is not one of %s",
			 name ? name : "(null)", names);
}

/* What a row sees without a plugin: the parameters, a configuration of
 * them with the authors' band (no window, no early start: the rows that
 * read those need a plugin), no running state. Not v05_config_default:
 * config.c sits above the rules. */
static void env_of(const struct v05_params *p, struct v05_config *c,
		   struct v05__rule_env *env)
{
	memset(c, 0, sizeof(*c));
	c->size = sizeof(*c);
	c->params = *p;
	c->pc_lower = V05_PC_LOWER;
	c->pc_upper = V05_PC_UPPER;
	*env = (struct v05__rule_env){ .params = p, .config = c };
}

V05_API int v05_decide(const struct v05_params *p, uint32_t k, bool has_target,
		       double k_target)
{
	int ret = v05_params_check(p);

	if (ret)
		return ret;
	if (k < 1 || k > p->k_max)
		return v05__fail(-ERANGE, "k = %u is outside [1, k_max = %u]", k,
				 p->k_max);
	if (has_target && !isfinite(k_target))
		return v05__fail(-EDOM, "k_target %g is not finite", k_target);
	if (!(v05__rule_of(p->mode)->flags & V05__RULE_OSLA))
		return V05_ACTION_STOP;
	return (int)v05__osla_u(p, k, has_target, k_target);
}

/* What v05_estimate and v05_keep take: valid parameters, 1..k_max finite
 * rewards in [-1, 1], and somewhere to write (out). */
static int check_group(const struct v05_params *p, const double *rewards,
		       uint32_t k, const void *out, const char *what)
{
	int ret = v05_params_check(p);

	if (ret)
		return ret;
	if (!rewards || !out)
		return v05__fail(-EINVAL, "%s: NULL argument", what);
	if (k < 1 || k > p->k_max)
		return v05__fail(-ERANGE, "%u rewards: need 1 to k_max = %u", k,
				 p->k_max);
	return v05__check_rewards(rewards, k);
}

V05_API int v05_keep(const struct v05_params *p, const double *rewards,
		     uint32_t k, uint64_t *keep)
{
	const struct v05__rule *r;
	int ret;

	v05__clear_error();
	ret = check_group(p, rewards, k, keep, "keep");
	if (ret)
		return ret;
	r = v05__rule_of(p->mode);
	*keep = r->keep ? r->keep(p, rewards, k) : v05__first_bits(k);
	return 0;
}

V05_API int v05_estimate(const struct v05_params *p, double prior,
			 const double *rewards, uint32_t k,
			 struct v05_estimate *out, double *adv)
{
	const struct v05__rule *r;
	struct v05__rule_env env;
	struct v05_config c;
	int ret;

	v05__clear_error();
	ret = v05_params_check(p);
	if (ret)
		return ret;
	r = v05__rule_of(p->mode);
	if (r->needs_plugin)
		return v05__fail(-EINVAL, "%s", r->needs_plugin);
	ret = check_group(p, rewards, k, out, "estimate");
	if (ret)
		return ret;
	if (!(isfinite(prior) && prior >= -1.0 && prior <= 1.0))
		return v05__fail(-EDOM, "prior %g is not finite in [-1, 1]", prior);
	env_of(p, &c, &env);
	r->estimate(&env, NULL, prior, rewards, k, out, adv);
	return 0;
}
