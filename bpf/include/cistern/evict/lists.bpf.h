/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/evict/lists.bpf.h - eviction: nodes and lists.
 *
 * Part of cistern/evict.bpf.h (include that, not this): a slot's node
 * and its registry entry (evict_node, evict_entry, evict_resident), and
 * the doubly-linked eviction lists threaded through evict_nodes:
 * create, add/move at either end, delete, head/tail/len, next/prev. Every
 * slot is checked against evict_capacity, every list id against
 * EVICT_MAX_LISTS, before a lookup.
 */
#ifndef CISTERN_EVICT_LISTS_BPF_H
#define CISTERN_EVICT_LISTS_BPF_H

/* ---- nodes and the registry ---- */

static __always_inline struct evict_node *evict_node(__u32 slot)
{
	if (slot >= evict_capacity)
		return NULL;
	return bpf_map_lookup_elem(&evict_nodes, &slot);
}

static __always_inline struct evict_entry *evict_entry(__u32 slot)
{
	if (slot >= evict_capacity)
		return NULL;
	return bpf_map_lookup_elem(&evict_entries, &slot);
}

/* 1 when slot holds an entry: what the cache checks every proposal against. */
static __always_inline int evict_resident(__u32 slot)
{
	struct evict_entry *e = evict_entry(slot);

	return e && e->resident;
}

static __always_inline __u32 evict_next(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	return n ? n->next : EVICT_NIL;
}

static __always_inline __u32 evict_prev(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	return n ? n->prev : EVICT_NIL;
}

/* ---- lists ---- */

static __always_inline struct evict_list *evict_list_get(__u32 list)
{
	if (list >= EVICT_MAX_LISTS)
		return NULL;
	return &evict_lists[list & (EVICT_MAX_LISTS - 1)];
}

static __always_inline int evict_list_create(void)
{
	for (int i = 0; i < EVICT_MAX_LISTS; i++) {
		struct evict_list *l = &evict_lists[i];

		if (!l->used) {
			l->used = 1;
			l->head = l->tail = EVICT_NIL;
			l->len = 0;
			return i;
		}
	}
	return -EVICT_ENOSPC;
}

static __always_inline __u32 evict_list_head(__u32 list)
{
	struct evict_list *l = evict_list_get(list);

	return l ? l->head : EVICT_NIL;
}

static __always_inline __u32 evict_list_tail(__u32 list)
{
	struct evict_list *l = evict_list_get(list);

	return l ? l->tail : EVICT_NIL;
}

static __always_inline __u32 evict_list_len(__u32 list)
{
	struct evict_list *l = evict_list_get(list);

	return l ? l->len : 0;
}

/* Takes n (the node of slot) off its list, if it is on one. */
static __always_inline void evict_unlink(struct evict_node *n)
{
	struct evict_list *l = evict_list_get(n->list);
	struct evict_node *p;

	if (!l)
		return;
	if (n->prev != EVICT_NIL) {
		p = evict_node(n->prev);
		if (p)
			p->next = n->next;
	} else {
		l->head = n->next;
	}
	if (n->next != EVICT_NIL) {
		p = evict_node(n->next);
		if (p)
			p->prev = n->prev;
	} else {
		l->tail = n->prev;
	}
	if (l->len)
		l->len--;
	n->list = EVICT_NIL;
	n->prev = n->next = EVICT_NIL;
}

static __always_inline int evict_list_add(__u32 list, __u32 slot, int at_tail)
{
	struct evict_list *l = evict_list_get(list);
	struct evict_node *n = evict_node(slot), *p;

	if (!l || !n || !l->used)
		return -EVICT_EINVAL;
	if (!evict_resident(slot))
		return -EVICT_ENOENT;
	evict_unlink(n);
	n->list = list;
	if (at_tail) {
		n->next = EVICT_NIL;
		n->prev = l->tail;
		p = l->tail != EVICT_NIL ? evict_node(l->tail) : NULL;
		if (p)
			p->next = slot;
		else
			l->head = slot;
		l->tail = slot;
	} else {
		n->prev = EVICT_NIL;
		n->next = l->head;
		p = l->head != EVICT_NIL ? evict_node(l->head) : NULL;
		if (p)
			p->prev = slot;
		else
			l->tail = slot;
		l->head = slot;
	}
	l->len++;
	return 0;
}

static __always_inline int evict_list_add_head(__u32 list, __u32 slot) { return evict_list_add(list, slot, 0); }
static __always_inline int evict_list_add_tail(__u32 list, __u32 slot) { return evict_list_add(list, slot, 1); }
static __always_inline int evict_list_move_head(__u32 list, __u32 slot) { return evict_list_add(list, slot, 0); }
static __always_inline int evict_list_move_tail(__u32 list, __u32 slot) { return evict_list_add(list, slot, 1); }

static __always_inline int evict_list_del(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	if (!n)
		return -EVICT_EINVAL;
	if (n->list == EVICT_NIL)
		return -EVICT_ENOENT;
	evict_unlink(n);
	return 0;
}

#endif /* CISTERN_EVICT_LISTS_BPF_H */
