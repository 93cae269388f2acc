/* tok_pieces.c - what a text's pieces are, for reasoning about the memos' working set: the
 * pieces k3's scanner cuts (k3_pretok_next), and for each distinct one its id count (k3's BPE
 * without memos), counted by length class (up to 7 bytes: m8; 8..16: m16; 17..48: the
 * long-piece table; longer: none) and id count, with their occurrences and how many are seen
 * once (README "Runs 75 to 77").
 *
 *   tok_pieces MODEL CONFIG FILE */
#include <stdint.h>
#include <string.h>

#include "frontend/tok_internal.h"
#include "tok_tool.h"

struct piece {
    uint64_t hash;     /* of the bytes; 0 = empty slot */
    uint32_t count;
    uint32_t n;
    uint32_t ids;
};

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: tok_pieces MODEL CONFIG FILE\n");
        return 2;
    }
    struct k3_tok *tok;
    size_t len;
    char *text = tok_tool_open("tok_pieces", argv, &tok, &len);
    if (!text) return 1;
    const uint8_t *s = (const uint8_t *)text;
    size_t mask = 1;
    while (mask < len) mask = mask * 2 + 1; /* at least as many slots as bytes: pieces fit */
    struct piece *tab = calloc(mask + 1, sizeof *tab);
    int32_t *out = malloc(sizeof(int32_t) * (len + 4));
    if (!tab || !out) {
        fprintf(stderr, "tok_pieces: out of memory\n");
        return 1;
    }
    size_t pieces = 0, distinct = 0;
    for (size_t p = 0; p < len; pieces++) {
        size_t e = k3_pretok_next(s, p, len), n = e - p;
        uint64_t h = tok_tool_piece_hash(s + p, n); /* 64 bits: a collision would merge two counts */
        size_t i = h & mask;
        while (tab[i].hash && tab[i].hash != h) i = (i + 1) & mask;
        if (!tab[i].hash) {
            tab[i] = (struct piece){h, 0, (uint32_t)n, (uint32_t)k3_bpe_piece(tok, s + p, n, len - p, NULL, out)};
            distinct++;
        }
        tab[i].count++;
        p = e;
    }
    static const char *cls_name[4] = {"1..7", "8..16", "17..48", "49.."};
    size_t d[4][3] = {{0}}, occ[4][3] = {{0}}, once[4][3] = {{0}};
    for (size_t i = 0; i <= mask; i++) {
        if (!tab[i].hash) continue;
        int c = tab[i].n <= 7 ? 0 : tab[i].n <= 16 ? 1 : tab[i].n <= 48 ? 2 : 3;
        int k = tab[i].ids >= 3 ? 2 : (int)tab[i].ids - 1;
        d[c][k]++;
        occ[c][k] += tab[i].count;
        once[c][k] += tab[i].count == 1;
    }
    printf("%s: %zu bytes, %zu pieces, %zu distinct\n", argv[3], len, pieces, distinct);
    printf("bytes   ids  distinct  occurrences  seen once\n");
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 3; k++)
            printf("%-7s %-4s %8zu %12zu %10zu\n", cls_name[c], k == 2 ? "3+" : k ? "2" : "1", d[c][k],
                   occ[c][k], once[c][k]);
    free(out);
    free(tab);
    free(text);
    k3_tok_free(tok);
    return 0;
}
