// rdmacam's data mover, contract version 1 (docs/firmware.md, "The data mover in Verilog"):
// the CPU's RC requester hands it one 128-byte transmit descriptor per packet; it reads the
// payload from frame memory over AXI4, builds the Ethernet frame (headers from the
// descriptor, payload, pad, ICRC computed in line) and streams it to a MAC over AXI-Stream,
// 64 bits a clock.
//
// Interfaces, all on aclk (one clock domain; aresetn synchronous, active low, as AXI's, and
// held for at least two clocks: it is registered once before it resets anything):
//   s_axil_*   AXI4-Lite slave, 32-bit: the registers and the descriptor window
//   s_axis_desc_*  AXI-Stream, 64-bit: descriptors from a DMA engine (16 beats, TLAST on the
//              16th); shares the intake with the window, a whole descriptor at a time
//   m_axi_*    AXI4 read master, 64-bit, bursts of at most MAX_BURST beats (16 fits an AXI3
//              HP port of a Zynq-7000)
//   m_axis_*   AXI-Stream, 64-bit, TKEEP: Ethernet frames without FCS, to the MAC
`default_nettype none

module rdmacam_mover #(
    parameter integer ADDR_W = 32,
    parameter integer REGION_BITS = 2,
    parameter integer SLOTS_LOG2 = 2,
    parameter integer FIFO_LOG2 = 9,
    parameter integer MAX_BURST = 16,
    parameter integer MAX_PAYLOAD = 4096
) (
    input  wire               aclk,
    input  wire               aresetn,

    input  wire [11:0]        s_axil_awaddr,
    input  wire [2:0]         s_axil_awprot,
    input  wire               s_axil_awvalid,
    output wire               s_axil_awready,
    input  wire [31:0]        s_axil_wdata,
    input  wire [3:0]         s_axil_wstrb,
    input  wire               s_axil_wvalid,
    output wire               s_axil_wready,
    output wire [1:0]         s_axil_bresp,
    output reg                s_axil_bvalid,
    input  wire               s_axil_bready,
    input  wire [11:0]        s_axil_araddr,
    input  wire [2:0]         s_axil_arprot,
    input  wire               s_axil_arvalid,
    output wire               s_axil_arready,
    output reg  [31:0]        s_axil_rdata,
    output wire [1:0]         s_axil_rresp,
    output reg                s_axil_rvalid,
    input  wire               s_axil_rready,

    input  wire [63:0]        s_axis_desc_tdata,
    input  wire               s_axis_desc_tvalid,
    input  wire               s_axis_desc_tlast,
    output wire               s_axis_desc_tready,

    output wire [ADDR_W-1:0]  m_axi_araddr,
    output wire [7:0]         m_axi_arlen,
    output wire [2:0]         m_axi_arsize,
    output wire [1:0]         m_axi_arburst,
    output wire [3:0]         m_axi_arcache,
    output wire [2:0]         m_axi_arprot,
    output wire               m_axi_arvalid,
    input  wire               m_axi_arready,
    input  wire [63:0]        m_axi_rdata,
    input  wire [1:0]         m_axi_rresp,
    input  wire               m_axi_rlast,
    input  wire               m_axi_rvalid,
    output wire               m_axi_rready,

    output wire [63:0]        m_axis_tdata,
    output wire [7:0]         m_axis_tkeep,
    output wire               m_axis_tlast,
    output wire               m_axis_tvalid,
    input  wire               m_axis_tready
);
    localparam integer REGIONS = 1 << REGION_BITS;

    // aresetn, registered once, drives an active-high synchronous reset inside (7-series
    // flip-flops reset active-high; the register also cuts the reset net's path from outside)
    reg rst;
    always @(posedge aclk) rst <= !aresetn;
    localparam integer SLOTS = 1 << SLOTS_LOG2;
    localparam [31:0] ID = 32'h5244_4D56; // "RDMV"
    localparam [7:0] E_READ = 8'h0A;
    localparam [7:0] E_WINDOW_ORDER = 8'h0B;

    // ------------------------------------------------------------ registers
    reg                        enable;
    reg  [47:0]                mac_dst;
    reg  [47:0]                mac_src;
    reg  [ADDR_W-1:0]          base [0:REGIONS-1];
    reg  [31:0]                size [0:REGIONS-1];
    reg  [7:0]                 error;
    reg  [31:0]                error_psn;
    reg  [31:0]                frames_sent;
    reg  [31:0]                refused;
    reg  [31:0]                read_errors;

    wire [(ADDR_W<<REGION_BITS)-1:0] base_flat;
    wire [(32<<REGION_BITS)-1:0]     size_flat;
    genvar g;
    generate
        for (g = 0; g < REGIONS; g = g + 1) begin : region_flat
            assign base_flat[g*ADDR_W +: ADDR_W] = base[g];
            assign size_flat[g*32 +: 32] = size[g];
        end
    endgenerate

    // ------------------------------------------------------------ descriptor window
    reg        win_valid;      // a beat waits for the intake
    reg [63:0] win_data;
    reg        win_last;
    reg        win_abort;      // the beat ends a descriptor the CPU abandoned
    reg [31:0] win_low;
    reg [4:0]  win_idx;        // the window word the CPU must write next

    // ------------------------------------------------------------ intake arbiter
    // a whole descriptor from one source at a time
    localparam [1:0] SRC_NONE = 2'd0, SRC_WIN = 2'd1, SRC_STREAM = 2'd2;
    reg  [1:0] src;
    wire [1:0] src_now = (src != SRC_NONE) ? src
                        : win_valid ? SRC_WIN
                        : s_axis_desc_tvalid ? SRC_STREAM : SRC_NONE;
    wire        in_ready;
    wire        in_valid = (src_now == SRC_WIN) ? win_valid : (src_now == SRC_STREAM) && s_axis_desc_tvalid;
    wire [63:0] in_data = (src_now == SRC_WIN) ? win_data : s_axis_desc_tdata;
    wire        in_last = (src_now == SRC_WIN) ? win_last : s_axis_desc_tlast;
    wire        in_abort = (src_now == SRC_WIN) && win_abort;
    wire        in_fire = in_valid && in_ready;
    assign s_axis_desc_tready = (src_now == SRC_STREAM) && in_ready;

    always @(posedge aclk) begin
        if (rst) src <= SRC_NONE;
        else if (in_fire) src <= in_last ? SRC_NONE : src_now;
    end

    // ------------------------------------------------------------ AXI4-Lite
    wire        wr = s_axil_awvalid && s_axil_wvalid && !s_axil_bvalid;
    wire        wr_window = s_axil_awaddr[11:7] == 5'b00010;   // 0x100-0x17F
    wire [4:0]  wr_word = s_axil_awaddr[6:2];
    // a window word that completes a beat waits while the previous beat is still held
    wire        wr_ok = wr && !(wr_window && win_valid);
    assign s_axil_awready = wr_ok;
    assign s_axil_wready = wr_ok;
    assign s_axil_bresp = 2'b00;
    assign s_axil_arready = !s_axil_rvalid;
    assign s_axil_rresp = 2'b00;

    // ------------------------------------------------------------ the core
    wire                   rd_valid, rd_pop;
    wire [ADDR_W-1:0]      rd_addr;
    wire [12:0]            rd_len;
    wire                   tx_valid, tx_ipv6, tx_done;
    wire [SLOTS_LOG2-1:0]  tx_slot;
    wire [6:0]             tx_hlen;
    wire [1:0]             tx_pad;
    wire [12:0]            tx_len;
    wire [2:0]             tx_align;
    wire [SLOTS_LOG2+3:0]  hdr_addr;
    wire [63:0]            hdr_data;
    wire                   refuse;
    wire [7:0]             refuse_code;
    wire [31:0]            refuse_psn;
    wire [SLOTS_LOG2:0]    slots_free;
    wire                   fifo_push, fifo_pop, fifo_valid;
    wire [64:0]            fifo_din, fifo_dout;
    wire                   sent, sent_read_error, tx_busy;

    mover_desc #(
        .ADDR_W(ADDR_W), .REGION_BITS(REGION_BITS), .SLOTS_LOG2(SLOTS_LOG2),
        .MAX_PAYLOAD(MAX_PAYLOAD)
    ) desc (
        .aclk(aclk), .rst(rst), .enable(enable),
        .region_base(base_flat), .region_size(size_flat),
        .s_tdata(in_data), .s_tvalid(in_valid), .s_tlast(in_last), .s_tuser(in_abort),
        .s_tready(in_ready),
        .rd_valid(rd_valid), .rd_addr(rd_addr), .rd_len(rd_len), .rd_pop(rd_pop),
        .tx_valid(tx_valid), .tx_slot(tx_slot), .tx_ipv6(tx_ipv6), .tx_hlen(tx_hlen),
        .tx_pad(tx_pad), .tx_len(tx_len), .tx_align(tx_align), .tx_done(tx_done),
        .hdr_addr(hdr_addr), .hdr_data(hdr_data),
        .refuse(refuse), .refuse_code(refuse_code), .refuse_psn(refuse_psn),
        .slots_free(slots_free)
    );

    mover_read #(
        .ADDR_W(ADDR_W), .FIFO_LOG2(FIFO_LOG2), .MAX_BURST(MAX_BURST)
    ) read (
        .aclk(aclk), .rst(rst),
        .rd_valid(rd_valid), .rd_addr(rd_addr), .rd_len(rd_len), .rd_pop(rd_pop),
        .m_axi_araddr(m_axi_araddr), .m_axi_arlen(m_axi_arlen), .m_axi_arsize(m_axi_arsize),
        .m_axi_arburst(m_axi_arburst), .m_axi_arcache(m_axi_arcache),
        .m_axi_arprot(m_axi_arprot), .m_axi_arvalid(m_axi_arvalid),
        .m_axi_arready(m_axi_arready), .m_axi_rdata(m_axi_rdata), .m_axi_rresp(m_axi_rresp),
        .m_axi_rvalid(m_axi_rvalid), .m_axi_rready(m_axi_rready),
        .fifo_push(fifo_push), .fifo_din(fifo_din), .fifo_pop(fifo_pop)
    );

    mover_fifo #(.WIDTH(65), .DEPTH_LOG2(FIFO_LOG2)) payload (
        .aclk(aclk), .rst(rst), .push(fifo_push), .din(fifo_din), .pop(fifo_pop),
        .dout(fifo_dout), .dout_valid(fifo_valid)
    );

    mover_tx #(.SLOTS_LOG2(SLOTS_LOG2)) tx (
        .aclk(aclk), .rst(rst), .mac_dst(mac_dst), .mac_src(mac_src),
        .tx_valid(tx_valid), .tx_slot(tx_slot), .tx_ipv6(tx_ipv6), .tx_hlen(tx_hlen),
        .tx_pad(tx_pad), .tx_len(tx_len), .tx_align(tx_align), .tx_done(tx_done),
        .hdr_addr(hdr_addr), .hdr_data(hdr_data),
        .fifo_dout(fifo_dout), .fifo_valid(fifo_valid), .fifo_pop(fifo_pop),
        .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep),
        .m_axis_tlast(m_axis_tlast), .m_axis_tvalid(m_axis_tvalid),
        .m_axis_tready(m_axis_tready),
        .sent(sent), .sent_read_error(sent_read_error), .busy(tx_busy)
    );

    // AXI signals the mover has no use for: protection types, byte strobes (registers are
    // written whole), the low address bits, RLAST (bursts are counted)
    // verilator lint_off UNUSEDSIGNAL
    wire unused = &{1'b0, s_axil_awprot, s_axil_arprot, s_axil_wstrb, s_axil_awaddr[1:0],
                    s_axil_araddr[1:0], m_axi_rlast};
    // verilator lint_on UNUSEDSIGNAL

    wire idle = (slots_free == SLOTS[SLOTS_LOG2:0]) && !tx_busy;

    // ------------------------------------------------------------ register writes, status
    integer r;
    always @(posedge aclk) begin
        if (rst) begin
            enable <= 1'b0;
            mac_dst <= 48'd0;
            mac_src <= 48'd0;
            for (r = 0; r < REGIONS; r = r + 1) begin
                base[r] <= {ADDR_W{1'b0}};
                size[r] <= 32'd0;
            end
            error <= 8'h00;
            error_psn <= 32'd0;
            frames_sent <= 32'd0;
            refused <= 32'd0;
            read_errors <= 32'd0;
            win_valid <= 1'b0;
            win_data <= 64'd0;
            win_last <= 1'b0;
            win_abort <= 1'b0;
            win_low <= 32'd0;
            win_idx <= 5'd0;
            s_axil_bvalid <= 1'b0;
        end else begin
            if (s_axil_bready) s_axil_bvalid <= 1'b0;
            if (in_fire && src_now == SRC_WIN) win_valid <= 1'b0;
            if (sent) frames_sent <= frames_sent + 32'd1;
            if (sent_read_error) read_errors <= read_errors + 32'd1;
            if (refuse) refused <= refused + 32'd1;
            // the first error since STATUS was written stays
            if (error == 8'h00) begin
                if (refuse) begin
                    error <= refuse_code;
                    error_psn <= refuse_psn;
                end else if (sent_read_error) begin
                    error <= E_READ;
                end
            end
            if (wr_ok) begin
                s_axil_bvalid <= 1'b1;
                if (wr_window) begin
                    if (wr_word != win_idx) begin
                        // out of order: end a half-sent descriptor (the intake refuses it)
                        if (error == 8'h00) error <= E_WINDOW_ORDER;
                        if (win_idx > 5'd1) begin
                            win_valid <= 1'b1;
                            win_data <= 64'd0;
                            win_last <= 1'b1;
                            win_abort <= 1'b1;
                        end
                        win_idx <= 5'd0;
                    end else if (!wr_word[0]) begin
                        win_low <= s_axil_wdata;
                        win_idx <= win_idx + 5'd1;
                    end else begin
                        win_valid <= 1'b1;
                        win_data <= {s_axil_wdata, win_low};
                        win_last <= wr_word == 5'd31;
                        win_abort <= 1'b0;
                        win_idx <= win_idx + 5'd1;
                    end
                end else begin
                    case (s_axil_awaddr[11:2])
                        10'h002: enable <= s_axil_wdata[0];
                        10'h003: begin
                            error <= 8'h00;
                            error_psn <= 32'd0;
                        end
                        10'h008: mac_dst[47:32] <= s_axil_wdata[15:0];
                        10'h009: mac_dst[31:0] <= s_axil_wdata;
                        10'h00A: mac_src[47:32] <= s_axil_wdata[15:0];
                        10'h00B: mac_src[31:0] <= s_axil_wdata;
                        default: begin
                            for (r = 0; r < REGIONS; r = r + 1) begin
                                if (s_axil_awaddr[11:2] == 10'h010 + 10'd2 * r[9:0])
                                    base[r] <= s_axil_wdata[ADDR_W-1:0];
                                if (s_axil_awaddr[11:2] == 10'h011 + 10'd2 * r[9:0])
                                    size[r] <= s_axil_wdata;
                            end
                        end
                    endcase
                end
            end
        end
    end

    // ------------------------------------------------------------ register reads
    reg [31:0] rdata;
    always @(*) begin
        rdata = 32'd0;
        case (s_axil_araddr[11:2])
            10'h000: rdata = ID;
            10'h001: rdata = {MAX_BURST[7:0], SLOTS[7:0], REGIONS[7:0], 8'd1};
            10'h002: rdata = {31'd0, enable};
            10'h003: rdata = {8'd0, {(8-SLOTS_LOG2-1){1'b0}}, slots_free, 7'd0, idle, error};
            10'h004: rdata = error_psn;
            10'h005: rdata = frames_sent;
            10'h006: rdata = refused;
            10'h007: rdata = read_errors;
            10'h008: rdata = {16'd0, mac_dst[47:32]};
            10'h009: rdata = mac_dst[31:0];
            10'h00A: rdata = {16'd0, mac_src[47:32]};
            10'h00B: rdata = mac_src[31:0];
            default: begin
                for (r = 0; r < REGIONS; r = r + 1) begin
                    if (s_axil_araddr[11:2] == 10'h010 + 10'd2 * r[9:0])
                        rdata = {{(32-ADDR_W){1'b0}}, base[r]};
                    if (s_axil_araddr[11:2] == 10'h011 + 10'd2 * r[9:0])
                        rdata = size[r];
                end
            end
        endcase
    end

    always @(posedge aclk) begin
        if (rst) begin
            s_axil_rvalid <= 1'b0;
            s_axil_rdata <= 32'd0;
        end else begin
            if (s_axil_rready) s_axil_rvalid <= 1'b0;
            if (s_axil_arvalid && !s_axil_rvalid) begin
                s_axil_rvalid <= 1'b1;
                s_axil_rdata <= rdata;
            end
        end
    end
endmodule

`default_nettype wire
