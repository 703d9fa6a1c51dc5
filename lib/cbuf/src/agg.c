/* Aggregate cbufs: (id, offset, length) lists stored in a cbuf, so headers
 * can be prepended and payloads appended without copying. The aggregate's
 * owner writes it; receivers read it through cbuf2buf like any cbuf. */
#include <errno.h>
#include <string.h>

#include "cbuf.h"
#include "cbuf_layout.h"

void *cbuf__peek(cbuf_t id, size_t size);

cbuf_t cbuf_agg_alloc(unsigned cap)
{
	cbuf_t id;
	size_t sz = sizeof(struct cbuf_agg) + (size_t)cap * sizeof(struct cbuf_agg_ent);
	if (cap == 0 || sz > (size_t)CBUF_MAX_PAGES * CBUF_PAGE)
		return 0;
	struct cbuf_agg *a = cbuf_alloc(sz, &id);
	if (!a)
		return 0;
	a->magic = CBUF_AGG_MAGIC;
	a->n = 0;
	a->cap = (uint32_t)((cbuf_size(id) - sizeof(*a)) / sizeof(struct cbuf_agg_ent));
	return id;
}

static struct cbuf_agg *agg_rw(cbuf_t agg)
{
	/* the caller already holds a reference: look, do not count */
	struct cbuf_agg *a = cbuf__peek(agg, sizeof(struct cbuf_agg));
	if (!a)
		return NULL;
	return a->magic == CBUF_AGG_MAGIC && a->n <= a->cap ? a : NULL;
}

int cbuf_agg_append(cbuf_t agg, cbuf_t id, uint32_t off, uint32_t len)
{
	struct cbuf_agg *a = agg_rw(agg);
	if (!a)
		return -EINVAL;
	if (a->n >= a->cap)
		return -ENOSPC;
	if ((uint64_t)off + len > cbuf_size(id))
		return -ERANGE;
	a->ent[a->n] = (struct cbuf_agg_ent){.id = id, .off = off, .len = len};
	a->n++;
	return 0;
}

int cbuf_agg_prepend(cbuf_t agg, cbuf_t id, uint32_t off, uint32_t len)
{
	struct cbuf_agg *a = agg_rw(agg);
	if (!a)
		return -EINVAL;
	if (a->n >= a->cap)
		return -ENOSPC;
	if ((uint64_t)off + len > cbuf_size(id))
		return -ERANGE;
	memmove(&a->ent[1], &a->ent[0], a->n * sizeof(a->ent[0]));
	a->ent[0] = (struct cbuf_agg_ent){.id = id, .off = off, .len = len};
	a->n++;
	return 0;
}

int cbuf_agg_count(cbuf_t agg)
{
	struct cbuf_agg *a = agg_rw(agg);
	return a ? (int)a->n : -1;
}

int cbuf_agg_get(cbuf_t agg, int i, cbuf_t *id, uint32_t *off, uint32_t *len)
{
	struct cbuf_agg *a = agg_rw(agg);
	if (!a || i < 0 || (uint32_t)i >= a->n)
		return -EINVAL;
	*id = a->ent[i].id;
	*off = a->ent[i].off;
	*len = a->ent[i].len;
	return 0;
}
