// mover-sim: runs rdmacam's data mover (fpga/rtl) in Verilator on descriptors and frame memory
// from files, writes the frames it sends as a pcap, and optionally compares them with an
// expected pcap byte for byte. See docs/firmware.md, "The data mover in Verilog".
//
//   mover-sim --descriptors FILE --memory FILE --pcap OUT [options]
//
// The memory file is loaded at address 0 of a simulated AXI4 slave; region 0 is the whole
// file unless --region says otherwise. The harness checks AXI rules as it goes (burst size,
// type and length, no 4 KiB crossing, TKEEP only on a frame's last beat) and fails on any
// breach. Its last lines are name=value figures.

#include "Vrdmacam_mover.h"
#include "verilated.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

const char *USAGE =
    "usage: mover-sim --descriptors FILE --memory FILE --pcap OUT [options]\n"
    "  --descriptors FILE   transmit descriptors, 128 bytes each, back to back (contract v1)\n"
    "  --memory FILE        frame memory: loaded at address 0 of the simulated AXI4 memory\n"
    "  --pcap OUT           the frames the mover sent (Ethernet, no FCS)\n"
    "  --region N=BASE[:SIZE]  region N (0-3) at BASE, SIZE bytes (default: region 0 = the\n"
    "                       whole memory file; others unset, so refused)\n"
    "  --mac-dst MAC --mac-src MAC  Ethernet addresses (default 02:00:00:00:00:02 and :01)\n"
    "  --expect FILE        compare every frame with this pcap's, in order, byte for byte\n"
    "  --window             write descriptors through the AXI4-Lite window (default: the\n"
    "                       AXI-Stream descriptor input)\n"
    "  --backpressure P     drop TREADY on the frame output with probability P per clock\n"
    "  --stall P            stall the memory (ARREADY, RVALID) and the descriptor input with\n"
    "                       probability P per clock, and vary read latency from 4 to 64 clocks\n"
    "  --latency N          fixed read latency in clocks without --stall (default 16)\n"
    "  --seed N             random seed (default 1)\n"
    "  --window-disorder N  with --window: write descriptor N's words 0-29, then word 31 out of\n"
    "                       order (an abandoned descriptor), then the whole descriptor again\n"
    "  --expect-refused N   fail unless exactly N descriptors are refused\n"
    "  --expect-error CODE  fail unless STATUS holds this first error code (hex or decimal)\n"
    "  --quiet              print only the name=value lines\n";

[[noreturn]] void die(const std::string &msg) {
    std::fprintf(stderr, "mover-sim: %s\n", msg.c_str());
    std::exit(1);
}

std::vector<uint8_t> read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) die("cannot read " + path);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

uint64_t parse_num(const std::string &s) {
    char *end = nullptr;
    uint64_t v = std::strtoull(s.c_str(), &end, 0);
    if (s.empty() || *end) die("not a number: " + s);
    return v;
}

uint64_t parse_mac(const std::string &s) {
    unsigned b[6];
    if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6)
        die("not a MAC address: " + s);
    uint64_t v = 0;
    for (unsigned x : b) v = (v << 8) | (x & 0xff);
    return v;
}

// pcap, link type 1 (Ethernet), microsecond timestamps
struct Pcap {
    std::FILE *f;
    explicit Pcap(const std::string &path) : f(std::fopen(path.c_str(), "wb")) {
        if (!f) die("cannot write " + path);
        uint32_t hdr[6] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};
        std::fwrite(hdr, 4, 6, f);
    }
    void write(uint64_t usec, const std::vector<uint8_t> &frame) {
        uint32_t rec[4] = {uint32_t(usec / 1000000), uint32_t(usec % 1000000),
                           uint32_t(frame.size()), uint32_t(frame.size())};
        std::fwrite(rec, 4, 4, f);
        std::fwrite(frame.data(), 1, frame.size(), f);
    }
    ~Pcap() { std::fclose(f); }
};

std::vector<std::vector<uint8_t>> read_pcap(const std::string &path) {
    std::vector<uint8_t> b = read_file(path);
    std::vector<std::vector<uint8_t>> out;
    if (b.size() < 24) die(path + ": not a pcap file");
    uint32_t magic;
    std::memcpy(&magic, b.data(), 4);
    bool swap = magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1; // written big-endian
    if (!swap && magic != 0xa1b2c3d4 && magic != 0xa1b23c4d) die(path + ": not a pcap file");
    size_t at = 24;
    while (at + 16 <= b.size()) {
        uint32_t incl;
        std::memcpy(&incl, &b[at + 8], 4);
        if (swap) incl = __builtin_bswap32(incl);
        at += 16;
        if (at + incl > b.size()) die(path + ": truncated record");
        out.emplace_back(b.begin() + at, b.begin() + at + incl);
        at += incl;
    }
    return out;
}

struct Burst {
    uint64_t addr;
    unsigned beats;
    uint64_t ready_at;
};

struct Options {
    std::string descriptors, memory, pcap, expect;
    uint64_t base[4] = {0, 0, 0, 0};
    uint64_t size[4] = {0, 0, 0, 0};
    bool region_set[4] = {false, false, false, false};
    uint64_t mac_dst = 0x020000000002ULL, mac_src = 0x020000000001ULL;
    bool window = false, quiet = false;
    double backpressure = 0, stall = 0;
    unsigned latency = 16;
    uint64_t seed = 1;
    long expect_refused = -1, expect_error = -1;
    long window_disorder = -1;
};

Options parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value\n" + USAGE);
            return argv[++i];
        };
        if (a == "--descriptors") o.descriptors = val();
        else if (a == "--memory") o.memory = val();
        else if (a == "--pcap") o.pcap = val();
        else if (a == "--expect") o.expect = val();
        else if (a == "--window") o.window = true;
        else if (a == "--quiet") o.quiet = true;
        else if (a == "--backpressure") o.backpressure = std::atof(val().c_str());
        else if (a == "--stall") o.stall = std::atof(val().c_str());
        else if (a == "--latency") o.latency = unsigned(parse_num(val()));
        else if (a == "--seed") o.seed = parse_num(val());
        else if (a == "--mac-dst") o.mac_dst = parse_mac(val());
        else if (a == "--mac-src") o.mac_src = parse_mac(val());
        else if (a == "--window-disorder") o.window_disorder = long(parse_num(val()));
        else if (a == "--expect-refused") o.expect_refused = long(parse_num(val()));
        else if (a == "--expect-error") o.expect_error = long(parse_num(val()));
        else if (a == "--region") {
            std::string v = val();
            size_t eq = v.find('=');
            if (eq == std::string::npos) die("--region wants N=BASE[:SIZE]");
            uint64_t n = parse_num(v.substr(0, eq));
            if (n > 3) die("--region: regions are 0 to 3");
            std::string rest = v.substr(eq + 1);
            size_t colon = rest.find(':');
            o.base[n] = parse_num(rest.substr(0, colon));
            o.size[n] = colon == std::string::npos ? 0 : parse_num(rest.substr(colon + 1));
            o.region_set[n] = true;
        } else if (a == "--help" || a == "-h") {
            std::fputs(USAGE, stdout);
            std::exit(0);
        } else die("unknown option " + a + "\n" + USAGE);
    }
    if (o.descriptors.empty() || o.memory.empty() || o.pcap.empty()) die(std::string("missing a file\n") + USAGE);
    if (o.backpressure < 0 || o.backpressure >= 1 || o.stall < 0 || o.stall >= 1)
        die("--backpressure and --stall are probabilities in [0, 1)");
    return o;
}

class Sim {
  public:
    Sim(const Options &o, std::vector<uint8_t> memory)
        : o_(o), mem_(std::move(memory)), rng_(o.seed), top_(new Vrdmacam_mover) {}
    ~Sim() { top_->final(); }

    Vrdmacam_mover &top() { return *top_; }
    uint64_t cycle() const { return cycle_; }

    bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

    // One clock: inputs as set; handshakes decided on the values before the edge.
    void tick() {
        drive_memory();
        drive_output();
        top_->aclk = 0;
        top_->eval();
        bool ar = top_->m_axi_arvalid && top_->m_axi_arready;
        bool r = top_->m_axi_rvalid && top_->m_axi_rready;
        bool out = top_->m_axis_tvalid && top_->m_axis_tready;
        uint64_t araddr = top_->m_axi_araddr;
        unsigned arlen = top_->m_axi_arlen, arsize = top_->m_axi_arsize, arburst = top_->m_axi_arburst;
        uint64_t tdata = top_->m_axis_tdata;
        unsigned tkeep = top_->m_axis_tkeep;
        bool tlast = top_->m_axis_tlast;
        top_->aclk = 1;
        top_->eval();
        cycle_++;
        if (ar) accept_burst(araddr, arlen, arsize, arburst);
        if (r) {
            Burst &b = bursts_.front();
            b.addr += 8;
            if (--b.beats == 0) bursts_.pop_front();
        }
        if (out) take_beat(tdata, tkeep, tlast);
    }

    void reset() {
        top_->aresetn = 0;
        for (int i = 0; i < 4; i++) tick();
        top_->aresetn = 1;
        tick();
    }

    // AXI4-Lite, one transfer at a time
    void write_reg(uint32_t addr, uint32_t data) {
        top_->s_axil_awaddr = addr;
        top_->s_axil_wdata = data;
        top_->s_axil_wstrb = 0xf;
        top_->s_axil_awvalid = 1;
        top_->s_axil_wvalid = 1;
        top_->s_axil_bready = 1;
        for (int n = 0;; n++) {
            top_->aclk = 0;
            top_->eval();
            bool done = top_->s_axil_awready && top_->s_axil_wready;
            tick_keep_inputs();
            if (done) break;
            if (n > 1000000) die("register write stuck");
        }
        top_->s_axil_awvalid = 0;
        top_->s_axil_wvalid = 0;
        while (!top_->s_axil_bvalid) tick_keep_inputs();
        tick_keep_inputs(); // B handshake
    }

    uint32_t read_reg(uint32_t addr) {
        top_->s_axil_araddr = addr;
        top_->s_axil_arvalid = 1;
        top_->s_axil_rready = 1;
        top_->aclk = 0;
        top_->eval();
        while (!top_->s_axil_arready) tick_keep_inputs();
        tick_keep_inputs();
        top_->s_axil_arvalid = 0;
        while (!top_->s_axil_rvalid) tick_keep_inputs();
        uint32_t v = top_->s_axil_rdata;
        tick_keep_inputs();
        return v;
    }

    void tick_keep_inputs() { tick(); }

    // a read burst or a frame still under way in the harness
    bool pending() const { return !bursts_.empty() || !cur_.empty(); }

    std::vector<std::vector<uint8_t>> frames;
    std::vector<uint64_t> frame_end_cycle;
    uint64_t first_beat_cycle = 0, last_beat_cycle = 0;

  private:
    void accept_burst(uint64_t addr, unsigned arlen, unsigned arsize, unsigned arburst) {
        unsigned beats = arlen + 1;
        if (arsize != 3) die("ARSIZE " + std::to_string(arsize) + ", not 8 bytes");
        if (arburst != 1) die("ARBURST not INCR");
        if (beats > 16) die("a burst of " + std::to_string(beats) + " beats (max 16)");
        if (addr % 8) die("an unaligned burst address");
        if ((addr & 0xfff) + beats * 8 > 4096) die("a burst crosses a 4 KiB boundary");
        unsigned lat = o_.stall > 0 ? 4 + unsigned(rng_() % 61) : o_.latency;
        uint64_t at = cycle_ + lat;
        if (!bursts_.empty() && bursts_.back().ready_at > at) at = bursts_.back().ready_at;
        bursts_.push_back({addr, beats, at});
        bursts_accepted++;
    }

    void drive_memory() {
        top_->m_axi_arready = !chance(o_.stall);
        bool have = !bursts_.empty() && bursts_.front().ready_at <= cycle_;
        top_->m_axi_rvalid = have && !chance(o_.stall);
        if (have) {
            const Burst &b = bursts_.front();
            uint64_t v = 0;
            bool inside = b.addr + 8 <= mem_.size();
            if (inside)
                for (int i = 7; i >= 0; i--) v = (v << 8) | mem_[b.addr + i];
            top_->m_axi_rdata = v;
            top_->m_axi_rresp = inside ? 0 : 2; // SLVERR past the end of memory
            top_->m_axi_rlast = b.beats == 1;
        }
    }

    void drive_output() { top_->m_axis_tready = !chance(o_.backpressure); }

    void take_beat(uint64_t tdata, unsigned tkeep, bool tlast) {
        if (cur_.empty() && frames.empty()) first_beat_cycle = cycle_;
        last_beat_cycle = cycle_;
        if (!tlast && tkeep != 0xff) die("TKEEP " + std::to_string(tkeep) + " before a frame's last beat");
        if (tkeep == 0 || (tkeep & (tkeep + 1))) die("TKEEP not contiguous from lane 0");
        for (int i = 0; i < 8; i++)
            if (tkeep & (1u << i)) cur_.push_back(uint8_t(tdata >> (8 * i)));
        if (tlast) {
            frames.push_back(std::move(cur_));
            frame_end_cycle.push_back(cycle_);
            cur_.clear();
        }
    }

    const Options &o_;
    std::vector<uint8_t> mem_;
    std::mt19937_64 rng_;
    std::unique_ptr<Vrdmacam_mover> top_;
    std::deque<Burst> bursts_;
    std::vector<uint8_t> cur_;
    uint64_t cycle_ = 0;

  public:
    uint64_t bursts_accepted = 0;
};

} // namespace

int main(int argc, char **argv) {
    Verilated::commandArgs(argc, argv);
    Options o = parse(argc, argv);
    std::vector<uint8_t> desc = read_file(o.descriptors);
    if (desc.size() % 128) die(o.descriptors + ": not a whole number of 128-byte descriptors");
    std::vector<uint8_t> memory = read_file(o.memory);
    if (!o.region_set[0]) {
        o.base[0] = 0;
        o.size[0] = memory.size();
        o.region_set[0] = true;
    }
    for (int r = 0; r < 4; r++)
        if (o.region_set[r] && o.size[r] == 0) o.size[r] = memory.size() - std::min<uint64_t>(o.base[r], memory.size());
    size_t n_desc = desc.size() / 128;

    Sim sim(o, std::move(memory));
    Vrdmacam_mover &t = sim.top();
    t.s_axis_desc_tvalid = 0;
    t.s_axil_awvalid = t.s_axil_wvalid = t.s_axil_arvalid = 0;
    t.s_axil_bready = t.s_axil_rready = 1;
    sim.reset();

    if (sim.read_reg(0x00) != 0x52444D56) die("no mover at the register block (ID)");
    sim.write_reg(0x20, uint32_t(o.mac_dst >> 32));
    sim.write_reg(0x24, uint32_t(o.mac_dst));
    sim.write_reg(0x28, uint32_t(o.mac_src >> 32));
    sim.write_reg(0x2c, uint32_t(o.mac_src));
    for (int r = 0; r < 4; r++) {
        if (!o.region_set[r]) continue;
        sim.write_reg(0x40 + 8 * r, uint32_t(o.base[r]));
        sim.write_reg(0x44 + 8 * r, uint32_t(o.size[r]));
    }
    sim.write_reg(0x08, 1); // ENABLE

    uint64_t start = sim.cycle();
    if (o.window) {
        for (size_t d = 0; d < n_desc; d++) {
            if (long(d) == o.window_disorder) {
                auto word = [&](int w) {
                    uint32_t v;
                    std::memcpy(&v, &desc[d * 128 + w * 4], 4);
                    return v;
                };
                for (int w = 0; w < 30; w++) sim.write_reg(0x100 + 4 * w, word(w));
                sim.write_reg(0x17c, word(31)); // skips word 30
            }
            for (int w = 0; w < 32; w++) {
                uint32_t v;
                std::memcpy(&v, &desc[d * 128 + w * 4], 4);
                sim.write_reg(0x100 + 4 * w, v);
            }
        }
    } else {
        size_t beat = 0, beats = n_desc * 16;
        while (beat < beats) {
            bool offer = !sim.chance(o.stall);
            uint64_t v;
            std::memcpy(&v, &desc[beat * 8], 8);
            t.s_axis_desc_tdata = v;
            t.s_axis_desc_tlast = (beat % 16) == 15;
            t.s_axis_desc_tvalid = offer;
            t.aclk = 0;
            t.eval();
            bool fire = offer && t.s_axis_desc_tready;
            sim.tick();
            if (fire) beat++;
            if (sim.cycle() - start > 100000000ULL) die("descriptor input stuck");
        }
        t.s_axis_desc_tvalid = 0;
    }
    // run until the mover is idle (STATUS bit 8) and stays so
    uint64_t quiet = 0;
    while (quiet < 64) {
        sim.tick();
        t.aclk = 0;
        t.eval();
        bool idle_now = !t.m_axis_tvalid && !t.m_axi_arvalid && !sim.pending();
        quiet = idle_now ? quiet + 1 : 0;
        if (sim.cycle() - start > 200000000ULL) die("the mover never went idle");
    }
    uint32_t status = sim.read_reg(0x0c);
    uint32_t error_psn = sim.read_reg(0x10);
    uint32_t sent = sim.read_reg(0x14);
    uint32_t refused = sim.read_reg(0x18);
    uint32_t read_errors = sim.read_reg(0x1c);
    if (!(status & 0x100)) die("STATUS does not say idle at the end");

    {
        Pcap pcap(o.pcap);
        for (size_t i = 0; i < sim.frames.size(); i++)
            pcap.write(uint64_t(double(sim.frame_end_cycle[i]) / 156.25), sim.frames[i]);
    }
    if (sent != sim.frames.size()) die("FRAMES_SENT disagrees with the frames seen");

    long mismatches = 0;
    uint64_t compared = 0;
    if (!o.expect.empty()) {
        auto want = read_pcap(o.expect);
        if (want.size() != sim.frames.size()) {
            std::fprintf(stderr, "mover-sim: %zu frames sent, %zu expected\n", sim.frames.size(), want.size());
            mismatches++;
        }
        for (size_t i = 0; i < std::min(want.size(), sim.frames.size()); i++) {
            compared++;
            const auto &a = sim.frames[i], &b = want[i];
            if (a == b) continue;
            mismatches++;
            size_t at = 0;
            while (at < a.size() && at < b.size() && a[at] == b[at]) at++;
            if (mismatches <= 5)
                std::fprintf(stderr, "mover-sim: frame %zu differs at byte %zu (%zu bytes sent, %zu expected)\n",
                             i, at, a.size(), b.size());
        }
    }

    uint64_t bytes = 0;
    for (auto &f : sim.frames) bytes += f.size();
    uint64_t span = sim.frames.empty() ? 0 : sim.last_beat_cycle - start + 1;
    if (!o.quiet)
        std::fprintf(stderr, "mover-sim: %zu descriptors, %zu frames, %u refused, first error %#x (PSN %#x)\n",
                     n_desc, sim.frames.size(), refused, status & 0xff, error_psn);
    std::printf("descriptors=%zu\nframes=%zu\nrefused=%u\nerror=0x%02x\nerror_psn=0x%x\nread_errors=%u\n",
                n_desc, sim.frames.size(), refused, status & 0xff, error_psn, read_errors);
    std::printf("bytes=%llu\ncycles=%llu\nbursts=%llu\n", (unsigned long long)bytes, (unsigned long long)span,
                (unsigned long long)sim.bursts_accepted);
    if (span)
        std::printf("bytes_per_cycle=%.3f\ncycles_per_frame=%.1f\n", double(bytes) / double(span),
                    double(span) / double(sim.frames.size()));
    if (!o.expect.empty()) std::printf("compared=%llu\nmismatches=%ld\n", (unsigned long long)compared, mismatches);

    int rc = 0;
    if (mismatches) rc = 1;
    if (o.expect_refused >= 0 && long(refused) != o.expect_refused) {
        std::fprintf(stderr, "mover-sim: %u descriptors refused, %ld expected\n", refused, o.expect_refused);
        rc = 1;
    }
    if (o.expect_error >= 0 && long(status & 0xff) != o.expect_error) {
        std::fprintf(stderr, "mover-sim: first error %#x, %#lx expected\n", status & 0xff, o.expect_error);
        rc = 1;
    }
    return rc;
}
