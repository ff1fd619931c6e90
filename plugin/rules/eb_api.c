/* SPDX-License-Identifier: MIT */
/*
 * v05-eb's checked calls that take a struct v05_params (v05_eb_choose,
 * v05_eb_first_wave, v05_eb_estimate): the parameters are checked by their mode's row
 * (v05_params_check, modes.c), so these sit above the rule table, and the
 * posterior they run (eb.c) below it.
 */
#include <errno.h>
#include <math.h>

#include "stats_core.h"
#include "../../shm/error.h"
#include "v05/stats.h"

V05_API int v05_eb_choose(const struct v05_params *p,
			  const struct v05_eb_fit *fit, double prior,
			  uint32_t k, double s)
{
	int ret = v05_params_check(p);

	if (!ret)
		ret = v05__eb_check_fit(fit);
	if (!ret)
		ret = v05__eb_check_group(prior, k, s);
	if (ret)
		return ret;
	if (k < 1 || k > p->k_max)
		return v05__fail(-ERANGE, "eb: k = %u is outside [1, k_max = %u]",
				 k, p->k_max);
	return (int)v05__eb_choose_u(p, fit, prior, k, s);
}

V05_API int v05_eb_first_wave(const struct v05_params *p,
			      const struct v05_eb_fit *fit, double prior,
			      uint32_t waves, double *risk)
{
	double r, pm;
	uint32_t k1;
	int ret = v05_params_check(p);

	if (!ret)
		ret = v05__eb_check_fit(fit);
	if (!ret)
		ret = v05__eb_check_group(prior, 0, 0.0);
	if (ret)
		return ret;
	if (!waves || (waves & 1u) ||
	    (p->k_max < 31 && (waves >> (p->k_max + 1))))
		return v05__fail(-EINVAL,
				 "eb_first_wave: waves 0x%x: want first-wave sizes (bit k: k samples) in [1, k_max = %u]",
				 waves, p->k_max);
	k1 = v05__eb_first_u(p, fit, prior, waves, &r, &pm);
	if (risk)
		*risk = r;
	return (int)k1;
}

V05_API int v05_eb_estimate(const struct v05_params *p,
			    const struct v05_eb_fit *fit, double prior,
			    const double *rewards, uint32_t k,
			    struct v05_estimate *out, double *adv)
{
	int ret;

	v05__clear_error();
	ret = v05_params_check(p);
	if (!ret)
		ret = v05__eb_check_fit(fit);
	if (ret)
		return ret;
	if (!rewards || !out)
		return v05__fail(-EINVAL, "eb_estimate: NULL argument");
	if (k < 1 || k > p->k_max)
		return v05__fail(-ERANGE, "%u rewards: need 1 to k_max = %u", k,
				 p->k_max);
	if (!(isfinite(prior) && prior >= -1.0 && prior <= 1.0))
		return v05__fail(-EDOM, "prior %g is not finite in [-1, 1]", prior);
	ret = v05__check_rewards(rewards, k);
	if (ret)
		return ret;
	v05__eb_estimate_u(p, fit, prior, rewards, k, out, adv);
	return 0;
}
