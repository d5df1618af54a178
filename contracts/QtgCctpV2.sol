// SPDX-License-Identifier: Apache-2.0
// CCTP V2-shaped contracts for qtg's bridge tests (issue 30): a message transmitter and a token
// messenger that follow Circle's V2 (`circlefin/evm-cctp-contracts` `src/v2`, see
// docs/cctp-reference.md §2): the message and burn layouts with the fields the attester fills
// (nonce, finalityThresholdExecuted, feeExecuted, expirationBlock) emitted as zero, m-of-n
// attestation, `usedNonces` keyed by the attested bytes32 nonce (nonce 0 pre-used), Standard
// and Fast finality, the fee paid on the destination out of the burned amount (to the fee
// recipient), the minimum fee and the denylist. The token is contracts/QtgCctp.sol's QtgUsdc,
// and the attestation check that file's `Attestable` (V1 and V2 share it, as Circle's do).
// Compiled with solc 0.8.28 (npm `solc`); QtgCctpV2_sol_*.bin are the committed bytecode,
// checked against a fresh compile by the tests.
pragma solidity 0.8.28;

import "./QtgCctp.sol";

interface IMessageHandlerV2 {
    function handleReceiveFinalizedMessage(uint32 remoteDomain, bytes32 sender, uint32 finalityThresholdExecuted, bytes calldata messageBody)
        external
        returns (bool);
    function handleReceiveUnfinalizedMessage(uint32 remoteDomain, bytes32 sender, uint32 finalityThresholdExecuted, bytes calldata messageBody)
        external
        returns (bool);
}

/// `message = version ‖ sourceDomain ‖ destinationDomain ‖ nonce ‖ sender ‖ recipient ‖
/// destinationCaller ‖ minFinalityThreshold ‖ finalityThresholdExecuted ‖ messageBody` (4, 4, 4,
/// 32, 32, 32, 32, 4, 4 bytes, then the body). Emitted with nonce and finalityThresholdExecuted
/// zero; the attester fills them before it signs keccak256(message).
contract MessageTransmitterV2 is Attestable {
    uint32 public immutable localDomain;
    uint32 public constant version = 1;
    uint32 public constant FINALITY_THRESHOLD_FINALIZED = 2000;
    /// The attested nonce => 1 once received; nonce 0 (an emitted, unattested message's) is used.
    mapping(bytes32 => uint256) public usedNonces;

    event MessageSent(bytes message);
    event MessageReceived(
        address indexed caller,
        uint32 sourceDomain,
        bytes32 indexed nonce,
        bytes32 sender,
        uint32 indexed finalityThresholdExecuted,
        bytes messageBody
    );

    constructor(uint32 domain, address initialAttester) Attestable(initialAttester) {
        localDomain = domain;
        usedNonces[bytes32(0)] = 1;
    }

    /// Behind [`QtgEip1967Proxy`] (as Circle deploys V2): the proxy's own roles (the caller),
    /// first attester and used nonce 0, once. `localDomain` is the implementation's immutable.
    function initialize(address initialAttester) external {
        _initializeAttestable(msg.sender, initialAttester);
        usedNonces[bytes32(0)] = 1;
    }

    function sendMessage(
        uint32 destinationDomain,
        bytes32 recipient,
        bytes32 destinationCaller,
        uint32 minFinalityThreshold,
        bytes calldata messageBody
    ) external {
        require(!paused, "Pausable: paused");
        require(destinationDomain != localDomain, "Domain is local domain");
        require(recipient != bytes32(0), "Recipient must be nonzero");
        bytes32 sender = bytes32(uint256(uint160(msg.sender)));
        emit MessageSent(
            abi.encodePacked(
                version, localDomain, destinationDomain, bytes32(0), sender, recipient, destinationCaller,
                minFinalityThreshold, uint32(0), messageBody
            )
        );
    }

    function receiveMessage(bytes calldata message, bytes calldata attestation) external returns (bool) {
        require(!paused, "Pausable: paused");
        _verifyAttestationSignatures(message, attestation);
        require(message.length >= 148, "Invalid message: too short");
        require(uint32(bytes4(message[8:12])) == localDomain, "Invalid destination domain");
        bytes32 destinationCaller = bytes32(message[108:140]);
        require(destinationCaller == bytes32(0) || destinationCaller == bytes32(uint256(uint160(msg.sender))), "Invalid caller for message");
        require(uint32(bytes4(message[0:4])) == version, "Invalid message version");
        bytes32 nonce = bytes32(message[12:44]);
        require(usedNonces[nonce] == 0, "Nonce already used");
        usedNonces[nonce] = 1;
        uint32 sourceDomain = uint32(bytes4(message[4:8]));
        bytes32 sender = bytes32(message[44:76]);
        address recipient = address(uint160(uint256(bytes32(message[76:108]))));
        uint32 finalityThresholdExecuted = uint32(bytes4(message[144:148]));
        bytes calldata body = message[148:];
        if (finalityThresholdExecuted < FINALITY_THRESHOLD_FINALIZED) {
            require(
                IMessageHandlerV2(recipient).handleReceiveUnfinalizedMessage(sourceDomain, sender, finalityThresholdExecuted, body),
                "handleReceiveUnfinalizedMessage() failed"
            );
        } else {
            require(
                IMessageHandlerV2(recipient).handleReceiveFinalizedMessage(sourceDomain, sender, finalityThresholdExecuted, body),
                "handleReceiveFinalizedMessage() failed"
            );
        }
        emit MessageReceived(msg.sender, sourceDomain, nonce, sender, finalityThresholdExecuted, body);
        return true;
    }
}

/// `burnMessage = version ‖ burnToken ‖ mintRecipient ‖ amount ‖ messageSender ‖ maxFee ‖
/// feeExecuted ‖ expirationBlock ‖ hookData` (4, 32 × 7 bytes, then the hook data). Burns the
/// whole amount on the source; on the destination mints `amount − feeExecuted` to the recipient
/// and `feeExecuted` to the fee recipient. Its own local minter, as the V1 test messenger.
contract TokenMessengerV2 is IMessageHandlerV2 {
    uint32 public constant messageBodyVersion = 1;
    uint32 public constant FINALITY_THRESHOLD_CONFIRMED = 1000;
    uint32 public constant FINALITY_THRESHOLD_FINALIZED = 2000;
    uint256 public constant MIN_FEE_MULTIPLIER = 10_000_000;
    address public owner;
    address public tokenController;
    address public feeRecipient;
    address public minFeeController;
    address public denylister;
    uint256 public minFee;
    MessageTransmitterV2 public immutable localMessageTransmitter;
    mapping(uint32 => bytes32) public remoteTokenMessengers;
    mapping(address => uint256) public burnLimitsPerMessage;
    mapping(bytes32 => address) public remoteTokensToLocalTokens;
    mapping(address => uint256) private denylisted;

    event DepositForBurn(
        address indexed burnToken,
        uint256 amount,
        address indexed depositor,
        bytes32 mintRecipient,
        uint32 destinationDomain,
        bytes32 destinationTokenMessenger,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 indexed minFinalityThreshold,
        bytes hookData
    );
    event MintAndWithdraw(address indexed mintRecipient, uint256 amount, address indexed mintToken, uint256 feeCollected);
    event Denylisted(address indexed account);
    event UnDenylisted(address indexed account);
    event MinFeeSet(uint256 minFee);
    event FeeRecipientSet(address feeRecipient);

    constructor(MessageTransmitterV2 transmitter, address feeRecipient_) {
        localMessageTransmitter = transmitter;
        _initialize(msg.sender, feeRecipient_);
    }

    /// Behind [`QtgEip1967Proxy`] (as Circle deploys V2): the proxy's own roles (the caller) and
    /// fee recipient, once. `localMessageTransmitter` is the implementation's immutable.
    function initialize(address feeRecipient_) external {
        _initialize(msg.sender, feeRecipient_);
    }

    function _initialize(address roles, address feeRecipient_) private {
        require(owner == address(0), "Initializable: contract is already initialized");
        owner = roles;
        tokenController = roles;
        minFeeController = roles;
        denylister = roles;
        feeRecipient = feeRecipient_;
    }

    function localMinter() external view returns (address) {
        return address(this);
    }

    function addRemoteTokenMessenger(uint32 domain, bytes32 tokenMessenger) external {
        require(msg.sender == owner, "Ownable: caller is not the owner");
        require(tokenMessenger != bytes32(0), "bytes32(0) not allowed");
        require(remoteTokenMessengers[domain] == bytes32(0), "TokenMessenger already set");
        remoteTokenMessengers[domain] = tokenMessenger;
    }

    function setMaxBurnAmountPerMessage(address token, uint256 burnLimitPerMessage) external {
        require(msg.sender == tokenController, "Caller is not tokenController");
        burnLimitsPerMessage[token] = burnLimitPerMessage;
    }

    function linkTokenPair(address token, uint32 remoteDomain, bytes32 remoteToken) external {
        require(msg.sender == tokenController, "Caller is not tokenController");
        bytes32 key = keccak256(abi.encodePacked(remoteDomain, remoteToken));
        require(remoteTokensToLocalTokens[key] == address(0), "Unable to link token pair");
        remoteTokensToLocalTokens[key] = token;
    }

    function getLocalToken(uint32 remoteDomain, bytes32 remoteToken) external view returns (address) {
        return remoteTokensToLocalTokens[keccak256(abi.encodePacked(remoteDomain, remoteToken))];
    }

    function setFeeRecipient(address feeRecipient_) external {
        require(msg.sender == owner, "Ownable: caller is not the owner");
        require(feeRecipient_ != address(0), "Zero address not allowed");
        feeRecipient = feeRecipient_;
        emit FeeRecipientSet(feeRecipient_);
    }

    function setMinFee(uint256 minFee_) external {
        require(msg.sender == minFeeController, "Caller is not the min fee controller");
        require(minFee_ < MIN_FEE_MULTIPLIER, "Min fee too high");
        minFee = minFee_;
        emit MinFeeSet(minFee_);
    }

    function getMinFeeAmount(uint256 amount) public view returns (uint256) {
        if (minFee == 0) return 0;
        require(amount > 1, "Amount too low");
        uint256 fee = (amount * minFee) / MIN_FEE_MULTIPLIER;
        return fee == 0 ? 1 : fee;
    }

    function denylist(address account) external {
        require(msg.sender == denylister, "Denylistable: caller is not denylister");
        denylisted[account] = 1;
        emit Denylisted(account);
    }

    function unDenylist(address account) external {
        require(msg.sender == denylister, "Denylistable: caller is not denylister");
        denylisted[account] = 0;
        emit UnDenylisted(account);
    }

    function isDenylisted(address account) external view returns (bool) {
        return denylisted[account] == 1;
    }

    function depositForBurn(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 minFinalityThreshold
    ) external {
        _depositForBurn(
            amount, destinationDomain, mintRecipient, burnToken, destinationCaller, maxFee, minFinalityThreshold, ""
        );
    }

    /// As `depositForBurn`, with hook data carried in the burn message (CCTP does not run it: a
    /// wrapper set as the destination caller does).
    function depositForBurnWithHook(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 minFinalityThreshold,
        bytes calldata hookData
    ) external {
        require(hookData.length > 0, "Hook data is empty");
        _depositForBurn(
            amount, destinationDomain, mintRecipient, burnToken, destinationCaller, maxFee, minFinalityThreshold, hookData
        );
    }

    function _depositForBurn(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 minFinalityThreshold,
        bytes memory hookData
    ) private {
        require(denylisted[msg.sender] == 0 && denylisted[tx.origin] == 0, "Denylistable: account is on denylist");
        require(amount > 0, "Amount must be nonzero");
        require(mintRecipient != bytes32(0), "Mint recipient must be nonzero");
        require(maxFee < amount, "Max fee must be less than amount");
        if (minFee > 0) {
            require(maxFee >= getMinFeeAmount(amount), "Insufficient max fee");
        }
        bytes32 destinationTokenMessenger = remoteTokenMessengers[destinationDomain];
        require(destinationTokenMessenger != bytes32(0), "No TokenMessenger for domain");
        require(QtgUsdc(burnToken).transferFrom(msg.sender, address(this), amount), "Transfer operation failed");
        uint256 allowed = burnLimitsPerMessage[burnToken];
        require(allowed > 0, "Burn token not supported");
        require(amount <= allowed, "Burn amount exceeds per tx limit");
        QtgUsdc(burnToken).burn(amount);
        bytes memory body = abi.encodePacked(
            messageBodyVersion,
            bytes32(uint256(uint160(burnToken))),
            mintRecipient,
            amount,
            bytes32(uint256(uint160(msg.sender))),
            maxFee,
            uint256(0),
            uint256(0),
            hookData
        );
        localMessageTransmitter.sendMessage(
            destinationDomain, destinationTokenMessenger, destinationCaller, minFinalityThreshold, body
        );
        emit DepositForBurn(
            burnToken, amount, msg.sender, mintRecipient, destinationDomain, destinationTokenMessenger, destinationCaller,
            maxFee, minFinalityThreshold, hookData
        );
    }

    function handleReceiveFinalizedMessage(uint32 remoteDomain, bytes32 sender, uint32, bytes calldata messageBody)
        external
        returns (bool)
    {
        _receive(remoteDomain, sender, messageBody);
        return true;
    }

    function handleReceiveUnfinalizedMessage(
        uint32 remoteDomain,
        bytes32 sender,
        uint32 finalityThresholdExecuted,
        bytes calldata messageBody
    ) external returns (bool) {
        require(finalityThresholdExecuted >= 500, "Unsupported finality threshold");
        _receive(remoteDomain, sender, messageBody);
        return true;
    }

    function _receive(uint32 remoteDomain, bytes32 sender, bytes calldata body) private {
        require(msg.sender == address(localMessageTransmitter), "Invalid message transmitter");
        require(sender != bytes32(0) && remoteTokenMessengers[remoteDomain] == sender, "Remote TokenMessenger unsupported");
        require(body.length >= 228, "Invalid burn message: too short");
        require(uint32(bytes4(body[0:4])) == messageBodyVersion, "Invalid message body version");
        bytes32 burnToken = bytes32(body[4:36]);
        address mintRecipient = address(uint160(uint256(bytes32(body[36:68]))));
        uint256 amount = uint256(bytes32(body[68:100]));
        uint256 maxFee = uint256(bytes32(body[132:164]));
        uint256 fee = uint256(bytes32(body[164:196]));
        uint256 expirationBlock = uint256(bytes32(body[196:228]));
        require(expirationBlock == 0 || expirationBlock > block.number, "Message expired and must be re-signed");
        require(fee == 0 || fee < amount, "Fee equals or exceeds amount");
        require(fee <= maxFee, "Fee exceeds max fee");
        address mintToken = remoteTokensToLocalTokens[keccak256(abi.encodePacked(remoteDomain, burnToken))];
        require(mintToken != address(0), "Mint token not supported");
        require(QtgUsdc(mintToken).mint(mintRecipient, amount - fee), "First mint operation failed");
        if (fee > 0) {
            require(QtgUsdc(mintToken).mint(feeRecipient, fee), "Second mint operation failed");
        }
        emit MintAndWithdraw(mintRecipient, amount - fee, mintToken, fee);
    }
}

/// V2's upgradeable contracts behind a proxy as Circle deploys them (`AdminUpgradableProxy`,
/// EIP-1967): the implementation in slot keccak256("eip1967.proxy.implementation") - 1, the admin
/// in keccak256("eip1967.proxy.admin") - 1; the admin may only upgrade, every other caller is
/// delegated to the implementation. `data` (an `initialize` call) sets the proxy's storage up
/// through the implementation, with the deployer as the caller.
contract QtgEip1967Proxy {
    bytes32 private constant IMPLEMENTATION_SLOT = 0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc;
    bytes32 private constant ADMIN_SLOT = 0xb53127684a568b3173ae13b9f8a6016e243e63b6e8ee1178d6a717850b5d6103;

    event Upgraded(address indexed implementation);

    constructor(address implementation_, address admin_, bytes memory data) {
        require(implementation_.code.length > 0, "Cannot set a proxy implementation to a non-contract address");
        _set(IMPLEMENTATION_SLOT, implementation_);
        _set(ADMIN_SLOT, admin_);
        emit Upgraded(implementation_);
        if (data.length > 0) {
            (bool ok, bytes memory reason) = implementation_.delegatecall(data);
            if (!ok) {
                assembly {
                    revert(add(reason, 32), mload(reason))
                }
            }
        }
    }

    function upgradeTo(address newImplementation) external {
        if (msg.sender != _get(ADMIN_SLOT)) {
            _delegate();
        }
        require(newImplementation.code.length > 0, "Cannot set a proxy implementation to a non-contract address");
        _set(IMPLEMENTATION_SLOT, newImplementation);
        emit Upgraded(newImplementation);
    }

    fallback() external {
        require(msg.sender != _get(ADMIN_SLOT), "Cannot call fallback function from the proxy admin");
        _delegate();
    }

    function _delegate() private {
        address implementation = _get(IMPLEMENTATION_SLOT);
        assembly {
            calldatacopy(0, 0, calldatasize())
            let result := delegatecall(gas(), implementation, 0, calldatasize(), 0, 0)
            returndatacopy(0, 0, returndatasize())
            switch result
            case 0 {
                revert(0, returndatasize())
            }
            default {
                return(0, returndatasize())
            }
        }
    }

    function _get(bytes32 slot) private view returns (address a) {
        assembly {
            a := sload(slot)
        }
    }

    function _set(bytes32 slot, address a) private {
        assembly {
            sstore(slot, a)
        }
    }
}
