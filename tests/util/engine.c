/* SPDX-License-Identifier: MIT */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "v05-internal/shm.h"
#include "v05/shm.h"

enum { OP_PUSH = 1, OP_CORRUPT = 2 };

struct cmd {
	uint64_t key;
	uint32_t sample;
	float reward;
	uint32_t op;
	uint32_t gen;
};

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t next_rand(uint64_t *s)
{
	return mix(*s += 0x9e3779b97f4a7c15ull);
}

void eng_init(struct eng *e, const char *name, const struct eng_prompt *pr,
	      uint32_t n, uint64_t seed, struct eng_result *res, uint64_t *keys)
{
	memset(e, 0, sizeof(*e));
	e->name = name;
	e->prompts = pr;
	e->n = n;
	e->seed = seed;
	e->res = res;
	e->keys = keys;
	for (uint32_t i = 0; i < n; i++)
		keys[i] = v05_key(pr[i].uid, strlen(pr[i].uid));
}

float eng_reward(const struct eng_prompt *pr, uint32_t sample, uint64_t seed)
{
	uint64_t h = mix(v05_key(pr->uid, strlen(pr->uid)) ^ mix(seed + sample));
	double u = (double)(h >> 11) / 9007199254740992.0;

	return u < pr->p ? 1.0f : -1.0f;
}

void eng_make_prompts(struct eng_prompt *out, uint32_t n, uint64_t seed,
		      double noise)
{
	uint64_t s = seed;

	for (uint32_t i = 0; i < n; i++) {
		double p = (double)(next_rand(&s) >> 11) / 9007199254740992.0;
		double u1 = ((double)(next_rand(&s) >> 11) + 1.0) / 9007199254740993.0;
		double u2 = (double)(next_rand(&s) >> 11) / 9007199254740992.0;
		double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
		double v = 2.0 * p - 1.0 + noise * z;

		snprintf(out[i].uid, sizeof(out[i].uid), "prompt-%llu-%u",
			 (unsigned long long)seed, i);
		out[i].p = p;
		out[i].prior = v > 1.0 ? 1.0 : (v < -1.0 ? -1.0 : v);
	}
}

/* A corrupt record straight into a lane of our own: flags != 0, which the
 * producer library never writes. */
static int push_corrupt(struct v05_segment *seg, struct v05_ring_hdr **lane,
			struct v05_ring_prod *ring, const struct cmd *c)
{
	struct v05_record *r;

	if (!*lane) {
		uint64_t me = v05__owner_self();

		/* A producer's attach maps no lanes: map each lane's file,
		 * as the library does, and keep the one claimed. */
		for (uint32_t i = 0; i < seg->hdr.geo.lane_count && !*lane; i++) {
			size_t len = v05__lane_stride(seg->hdr.geo.lane_capacity);
			int fd = v05__lane_file_open(seg, V05_FILE_LANE, i, O_RDWR);
			uint8_t *m = fd < 0 ? MAP_FAILED :
				     mmap(NULL, len, PROT_READ | PROT_WRITE,
					  MAP_SHARED, fd, 0);
			struct v05_ring_hdr *h;
			uint64_t zero = 0;

			if (fd >= 0)
				close(fd);
			if (m == MAP_FAILED)
				return -EIO;
			h = V05_AT(struct v05_ring_hdr, m, v05__lane_skew(i));
			if (__atomic_compare_exchange_n(&h->owner, &zero, me, 0,
							__ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE))
				*lane = h;
			else
				munmap(m, len);
		}
		if (!*lane)
			return -EBUSY;
		v05__ring_prod_init(ring, *lane, v05__lane_records(*lane),
				    seg->hdr.geo.lane_capacity, sizeof(*r));
	}
	while (v05__ring_prod_reserve(ring, 1))
		;
	r = v05__ring_prod_slot(ring, 0);
	r->key = c->key;
	r->sample = c->sample;
	r->reward = c->reward;
	r->gen = c->gen;
	r->flags = 0x80;
	r->zero = 0;
	r->seq = ring->tail;
	v05__ring_prod_commit(ring, 1);
	v05__ring_prod_publish(ring);
	return 0;
}

static int worker(const char *name, int fd)
{
	struct v05_producer *p;
	struct v05_segment seg;
	struct v05_ring_hdr *raw = NULL;
	struct v05_ring_prod ring;
	int have_seg = 0;
	struct cmd c;

	memset(&ring, 0, sizeof(ring));
	if (v05_producer_open(name, 0, &p))
		return 1;
	for (;;) {
		size_t got = 0;

		/* The driver's writes may split a command: read a whole one. */
		while (got < sizeof(c)) {
			ssize_t n = read(fd, (uint8_t *)&c + got, sizeof(c) - got);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		if (got == 0)
			break;
		if (got != sizeof(c))
			return 2;
		if (c.op == OP_CORRUPT) {
			if (!have_seg) {
				if (v05__segment_attach(name, V05_ROLE_PRODUCER,
							0, &seg))
					return 3;
				have_seg = 1;
			}
			if (push_corrupt(&seg, &raw, &ring, &c))
				return 4;
			continue;
		}
		{
			struct v05_reward r = { .key = c.key, .gen = c.gen,
						.sample = c.sample,
						.reward = c.reward };

			int ret = v05_producer_push_wait(p, &r, 1, 30000);

			if (ret != 1) {
				fprintf(stderr, "worker: push: %d %s\n", ret,
					v05_errmsg());
				return 5;
			}
		}
	}
	if (raw)
		__atomic_store_n(&raw->owner, 0, __ATOMIC_RELEASE);
	return v05_producer_close(p) ? 6 : 0;
}

int eng_start(struct eng *e, int nworkers)
{
	/* A dead worker shows as EPIPE on its pipe, not as a killed driver. */
	signal(SIGPIPE, SIG_IGN);
	e->nworkers = nworkers;
	for (int i = 0; i < nworkers; i++) {
		int fds[2];

		if (pipe(fds))
			return -errno;
		e->workers[i] = fork();
		if (e->workers[i] < 0)
			return -errno;
		if (e->workers[i] == 0) {
			close(fds[1]);
			for (int j = 0; j < i; j++)
				close(e->pipes[j]);
			_exit(worker(e->name, fds[0]));
		}
		close(fds[0]);
		e->pipes[i] = fds[1];
		fcntl(fds[1], F_SETFL, O_NONBLOCK);
	}
	return 0;
}

int eng_flush(struct eng *e)
{
	int pending = 0;

	for (int w = 0; w < e->nworkers; w++) {
		while (e->out_len[w]) {
			ssize_t n = write(e->pipes[w], e->out[w], e->out_len[w]);

			if (n < 0 && errno == EAGAIN)
				break;
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				int st = -1;

				waitpid(e->workers[w], &st, WNOHANG);
				fprintf(stderr, "engine: worker %d gone (status 0x%x): %s\n",
					w, st, strerror(errno));
				abort();
			}
			/* A large write may take part of a command; the worker
			 * reads whole commands back together. */
			memmove(e->out[w], e->out[w] + n, e->out_len[w] - (size_t)n);
			e->out_len[w] -= (size_t)n;
		}
		pending |= e->out_len[w] != 0;
	}
	return pending;
}

int eng_stop(struct eng *e)
{
	int failed = 0;

	/* Hand the workers what is left, then EOF. The plugin is not polled
	 * here, so this relies on the lanes holding it (they are sized to). */
	for (int i = 0; i < e->nworkers; i++) {
		fcntl(e->pipes[i], F_SETFL, 0);
		if (e->out_len[i] &&
		    write(e->pipes[i], e->out[i], e->out_len[i]) !=
			    (ssize_t)e->out_len[i])
			failed = 1;
		e->out_len[i] = 0;
		free(e->out[i]);
		e->out[i] = NULL;
		e->out_cap[i] = 0;
		close(e->pipes[i]);
	}
	for (int i = 0; i < e->nworkers; i++) {
		int st;

		if (waitpid(e->workers[i], &st, 0) != e->workers[i] ||
		    !WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "worker %d: status %d\n", i, st);
			failed = 1;
		}
	}
	e->nworkers = 0;
	return failed;
}

static void send_cmd(struct eng *e, const struct cmd *c)
{
	int w = (int)(e->next_worker++ % (uint32_t)e->nworkers);

	if (e->dirt.shuffle)
		w = (int)(next_rand(&e->rng) % (uint64_t)e->nworkers);
	if (e->out_len[w] + sizeof(*c) > e->out_cap[w]) {
		size_t cap = e->out_cap[w] ? 2 * e->out_cap[w] : 65536;

		e->out[w] = realloc(e->out[w], cap);
		if (!e->out[w])
			abort();
		e->out_cap[w] = cap;
	}
	memcpy(e->out[w] + e->out_len[w], c, sizeof(*c));
	e->out_len[w] += sizeof(*c);
}

int eng_index(const struct eng *e, uint64_t key)
{
	for (uint32_t i = 0; i < e->n; i++)
		if (e->keys[i] == key)
			return (int)i;
	return -1;
}

static void garbage(struct eng *e, uint64_t key, uint32_t gen)
{
	struct cmd c = { key, 0, NAN, OP_PUSH, gen };

	send_cmd(e, &c);
	e->dirt.sent_nan++;
	c.reward = 2.0f;
	send_cmd(e, &c);
	e->dirt.sent_range++;
	c.key = 0x5eed5eed5eed5eedull ^ key; /* nobody's key */
	c.reward = 1.0f;
	send_cmd(e, &c);
	e->dirt.sent_unknown++;
	c.key = key;
	c.sample = 63; /* never issued with k_max < 64 */
	send_cmd(e, &c);
	e->dirt.sent_unissued++;
}

void eng_handle(struct eng *e, const struct v05_decision *d)
{
	int i = eng_index(e, d->key);

	if (i < 0)
		abort();
	if (d->kind == V05_DECISION_REJECT) {
		/* The valid reward follows (this engine sends both). */
		if (!(d->flags & (V05_DF_NONFINITE | V05_DF_RANGE)) ||
		    __builtin_popcountll(d->samples) != 1)
			abort();
		e->dirt.rejects_reported++;
		return;
	}
	if (d->kind == V05_DECISION_SAMPLE) {
		uint32_t list[64], n = 0;

		for (uint32_t s = 0; s < 64; s++)
			if (d->samples >> s & 1)
				list[n++] = s;
		if (e->dirt.shuffle) {
			for (uint32_t j = n; j > 1; j--) {
				uint32_t r = (uint32_t)(next_rand(&e->rng) % j), t;

				t = list[j - 1];
				list[j - 1] = list[r];
				list[r] = t;
			}
		}
		for (uint32_t j = 0; j < n; j++) {
			struct cmd c = { d->key, list[j],
					 eng_reward(&e->prompts[i], list[j], e->seed),
					 OP_PUSH, d->gen };

			send_cmd(e, &c);
			if (e->dirt.dup_every &&
			    next_rand(&e->rng) % e->dirt.dup_every == 0) {
				send_cmd(e, &c);
				e->dirt.sent_dup++;
			}
			if (e->dirt.corrupt && e->dirt.sent_corrupt < e->dirt.corrupt) {
				c.op = OP_CORRUPT;
				send_cmd(e, &c);
				e->dirt.sent_corrupt++;
			}
		}
		for (uint32_t g = 0; g < e->dirt.garbage; g++)
			garbage(e, d->key, d->gen);
	} else {
		struct eng_result *r = &e->res[i];
		struct v05_group g;

		if (v05_group(e->p, d->slot, &g))
			abort();
		r->kind = d->kind;
		r->k = g.k;
		r->baseline = g.baseline;
		memcpy(r->rewards, g.rewards, 4u * g.k);
		memcpy(r->adv, g.advantages, 4u * g.k);
		e->finals++;
		if (e->dirt.late_every && e->finals % e->dirt.late_every == 0) {
			struct cmd c = { d->key, 0, g.rewards[0], OP_PUSH,
					 d->gen };

			send_cmd(e, &c);
			e->dirt.sent_late++;
		}
		if (e->release_finals)
			v05_release(e->p, d->slot, d->gen, d->key);
	}
	if (e->on_decision)
		e->on_decision(e, d);
}

int eng_submit(struct eng *e)
{
	struct v05_prompt_in *in = calloc(e->n, sizeof(*in));
	struct v05_decision *d = calloc(e->n, sizeof(*d));
	int n;

	if (!in || !d)
		return -ENOMEM;
	for (uint32_t i = 0; i < e->n; i++) {
		in[i].uid = e->prompts[i].uid;
		in[i].uid_len = (uint32_t)strlen(e->prompts[i].uid);
		in[i].prior = e->prompts[i].prior;
		e->keys[i] = v05_key(in[i].uid, in[i].uid_len);
	}
	n = v05_submit(e->p, in, e->n, d, NULL);
	for (int j = 0; j < n; j++)
		eng_handle(e, &d[j]);
	free(in);
	free(d);
	return n == (int)e->n ? 0 : -EIO;
}

int eng_run(struct eng *e, unsigned timeout_s)
{
	struct v05_decision d[256];
	uint64_t last = v05__now_ns();

	while (e->finals < e->n) {
		int n = v05_poll(e->p, d, 256), pending;

		if (n < 0)
			return n;
		for (int j = 0; j < n; j++)
			eng_handle(e, &d[j]);
		pending = eng_flush(e);
		if (n) {
			last = v05__now_ns();
			continue;
		}
		if (v05__now_ns() - last > (uint64_t)timeout_s * 1000000000ull)
			return -ETIMEDOUT;
		/* With commands still buffered, come back soon to write more
		 * (the pipe drains as workers read); else sleep on the plugin. */
		v05_wait(e->p, pending ? 1 : 100);
	}
	return 0;
}
