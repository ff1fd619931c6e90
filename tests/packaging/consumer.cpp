// SPDX-License-Identifier: MIT
// A C++ program built against the installed headers and libv05 through
// pkg-config (tests/packaging/run). It links only if every header declares
// its functions extern "C"; it prints the library's version for the run to
// compare with pkg-config's and the headers'. It checks the library's
// version against the headers' first (V05_CHECK_VERSION).
#include <v05.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

int main()
{
	// The run-time check the headers document, as a program starts.
	if (V05_CHECK_VERSION() < 0) {
		std::fprintf(stderr, "%s\n", v05_errmsg());
		return 1;
	}
#if !V05_VERSION_AT_LEAST(0, 5)
#error "the installed headers are older than 0.5"
#endif
	if (std::strcmp(v05_version(), V05_VERSION_STRING) != 0) {
		std::fprintf(stderr, "library %s, headers %s\n", v05_version(),
			     V05_VERSION_STRING);
		return 1;
	}

	// stats.h
	struct v05_params p;
	struct v05_estimate e;  // "struct": v05_estimate is also a function
	double r[4] = { 1, 1, 1, -1 }, adv[4];
	v05_params_default(&p);
	if (v05_estimate(&p, 0.8, r, 4, &e, adv) < 0 || e.k != 4 ||
	    !std::isfinite(e.baseline)) {
		std::fprintf(stderr, "v05_estimate: %s\n", v05_errmsg());
		return 1;
	}

	// plugin.h, shm.h, observer.h: a name that does not exist.
	struct v05_config c;
	v05_config_default(&c);
	if (v05_config_check(&c) < 0) {
		std::fprintf(stderr, "v05_config_check: %s\n", v05_errmsg());
		return 1;
	}
	struct v05_observer *o = nullptr;
	if (v05_observer_open("consumer-no-such-segment", 0, &o) != -ENOENT) {
		std::fprintf(stderr, "v05_observer_open: %s\n", v05_errmsg());
		return 1;
	}
	if (v05_segment_unlink("consumer-no-such-segment") != -ENOENT ||
	    !v05_wait_path_name(0) || !v05_counter_name(0)) {
		std::fprintf(stderr, "v05_segment_unlink: %s\n", v05_errmsg());
		return 1;
	}
	std::printf("%s\n", v05_version());
	return 0;
}
